//! What every accepted request must satisfy, whatever the guest sent.

use vhost_iocost::backend::virtio::request::{Limits, Request, RequestKind, SECTOR_SIZE};

pub fn check_accepted(req: &Request, limits: &Limits) {
    let end = req.offset.checked_add(req.len).expect("range overflows");
    match req.kind {
        RequestKind::Read | RequestKind::Write => {
            assert!(end <= limits.capacity, "{req:?} ends past the volume");
            assert!(req.len > 0 && req.len % SECTOR_SIZE == 0, "{req:?}");
            assert!(req.data.len() <= limits.seg_max as usize, "{req:?}");
            let data: u64 = req.data.iter().map(|s| u64::from(s.len)).sum();
            assert_eq!(data, req.len, "{req:?}: data segments and length disagree");
            assert!(!(limits.read_only && req.kind == RequestKind::Write));
        }
        RequestKind::Discard | RequestKind::WriteZeroes { .. } => {
            assert!(end <= limits.capacity, "{req:?} ends past the volume");
        }
        RequestKind::Flush | RequestKind::GetId => assert_eq!((req.offset, req.len), (0, 0)),
    }
    for s in &req.data {
        assert!(
            s.addr.checked_add(u64::from(s.len)).is_some(),
            "{s:?} wraps"
        );
    }
}
