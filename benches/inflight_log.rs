//! What inflight tracking adds per request: a batch of 32 requests marked popped, linked
//! into the batch list and cleared after publication, on a real region (a memfd) as a
//! frontend that negotiates INFLIGHT_SHMFD gets it. Criterion reports the time per batch;
//! divide by 32 for the cost per request.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use vhost_iocost::backend::virtio::inflight_log::Region;

fn mark_publish_clear_batch32(c: &mut Criterion) {
    let (region, _theirs) = Region::create(1, 256).unwrap();
    let region = Arc::new(region);
    let mut log = region.queue_log(0).unwrap();
    log.recover(0, 256, 0).unwrap();
    let mut used: u16 = 0;
    let heads: Vec<u16> = (0..32).collect();
    c.bench_function("inflight_mark_publish_clear_batch32", |b| {
        b.iter(|| {
            for &h in &heads {
                log.mark_popped(black_box(h));
            }
            log.link_batch(heads.iter().copied());
            used = used.wrapping_add(32);
            log.clear_batch(heads.iter().copied(), black_box(used));
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = mark_publish_clear_batch32
}
criterion_main!(benches);
