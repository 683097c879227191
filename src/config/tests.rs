use super::*;

const BASE: &str = r#"
[device]
path = "disk.img"
create_size = "1GiB"

[[group]]
name = "tenant-a"
weight = 200

[[volume]]
name = "a"
socket = "a.sock"
offset = "0"
size = "256MiB"
group = "tenant-a"

[[volume]]
name = "b"
socket = "b.sock"
offset = "256MiB"
size = "256MiB"
"#;

fn err_of(text: &str) -> String {
    Config::parse(text).unwrap_err().to_string()
}

#[test]
fn caps_are_checked_and_errors_name_the_key() {
    let capped = |caps: &str| {
        BASE.replace(
            "group = \"tenant-a\"",
            &format!("group = \"tenant-a\"\ncaps = {{ {caps} }}"),
        )
    };
    let c = Config::parse(&capped("iops = 2000, burst_iops = 4000, burst_seconds = 2")).unwrap();
    let caps = c.volumes[0].caps.unwrap();
    assert_eq!(
        (caps.iops, caps.burst_iops, caps.burst_seconds),
        (2000, 4000, Some(2))
    );
    let e = err_of(&capped("iops = 10, read_iops = 5"));
    assert!(e.contains("volume[0] \"a\".caps.iops"), "{e}");
    let e = err_of(&capped("bps = \"1MiB\", burst_bps = \"1KiB\""));
    assert!(e.contains("volume[0] \"a\".caps.burst_bps"), "{e}");
    assert!(Config::parse(&capped("ipos = 5")).is_err());
}

#[test]
fn demo_config_in_the_repository_is_valid() {
    let text = include_str!("../../configs/demo.toml");
    let config = Config::parse(text).expect("configs/demo.toml must validate");
    assert!(config.volumes.len() >= 2);
    assert!(config.device.create_size.is_some());
}

#[test]
fn defaults_are_applied() {
    let c = Config::parse(BASE).unwrap();
    assert!(c.device.direct);
    assert_eq!(c.device.queue_depth, 256);
    assert_eq!(c.volumes[1].weight, crate::qos::WEIGHT_DEFAULT);
    assert_eq!(c.volumes[1].num_queues, 1);
    assert_eq!(c.volumes[1].serial_bytes(), b"b");
}

#[test]
fn unknown_keys_are_refused_with_their_name() {
    let e = err_of(&BASE.replace("weight = 200", "weight = 200\nwieght = 3"));
    assert!(e.contains("wieght"), "{e}");
}

#[test]
fn overlapping_ranges_are_refused() {
    let e = err_of(&BASE.replace("offset = \"256MiB\"", "offset = \"128MiB\""));
    assert!(
        e.contains("volume[1] \"b\".offset") && e.contains("overlaps"),
        "{e}"
    );
}

#[test]
fn unaligned_offsets_and_sizes_are_refused() {
    let e = err_of(&BASE.replace("offset = \"256MiB\"", "offset = 268435457"));
    assert!(e.contains("\"b\".offset") && e.contains("multiple"), "{e}");
    let c = Config::parse(BASE).unwrap();
    assert!(c.validate_layout(1 << 30, 4096).is_ok());
    let e = c.validate_layout(1 << 30, 3 << 20).unwrap_err().to_string();
    assert!(e.contains("logical block size"), "{e}");
}

#[test]
fn ranges_past_the_device_end_are_refused() {
    let c = Config::parse(BASE).unwrap();
    let e = c.validate_layout(300 << 20, 512).unwrap_err().to_string();
    assert!(
        e.contains("\"b\".size") && e.contains("past the end"),
        "{e}"
    );
    let e = err_of(&BASE.replace("offset = \"256MiB\"", "offset = \"18446744073709551104\""));
    assert!(e.contains("\"b\".size") && e.contains("overflows"), "{e}");
}

#[test]
fn a_socket_whose_handover_path_cannot_be_bound_is_refused() {
    let long = format!("/run/{}.sock", "v".repeat(89));
    assert_eq!(long.len() + ".handover".len(), 108);
    let e = err_of(&BASE.replace("socket = \"a.sock\"", &format!("socket = \"{long}\"")));
    assert!(
        e.contains("\"a\".socket") && e.contains("<socket>.handover"),
        "{e}"
    );
    let fits = format!("/run/{}.sock", "v".repeat(88));
    let cfg = BASE.replace("socket = \"a.sock\"", &format!("socket = \"{fits}\""));
    assert!(Config::parse(&cfg).is_ok());
}

#[test]
fn duplicate_names_and_sockets_are_refused() {
    let e = err_of(&BASE.replace("name = \"b\"", "name = \"a\""));
    assert!(e.contains("duplicate volume name"), "{e}");
    let e = err_of(&BASE.replace("socket = \"b.sock\"", "socket = \"a.sock\""));
    assert!(e.contains("\"b\".socket"), "{e}");
}

#[test]
fn weights_out_of_range_are_refused() {
    let e = err_of(&BASE.replace("weight = 200", "weight = 0"));
    assert!(e.contains("group[0] \"tenant-a\".weight"), "{e}");
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "weight = 10001"));
    assert!(e.contains("\"a\".weight") && e.contains("10001"), "{e}");
}

#[test]
fn unknown_groups_and_cycles_are_refused() {
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "group = \"nope\""));
    assert!(e.contains("\"a\".group") && e.contains("nope"), "{e}");
    let cyclic = BASE.replace(
        "weight = 200",
        "weight = 200\nparent = \"t2\"\n[[group]]\nname = \"t2\"\nparent = \"tenant-a\"",
    );
    let e = err_of(&cyclic);
    assert!(e.contains("cycle"), "{e}");
}

#[test]
fn cpu_affinity_names_one_cpu_per_worker_at_most() {
    let allowed = crate::cpu_affinity::allowed().unwrap();
    let first = allowed[0];
    let with = |keys: &str| BASE.replace("group = \"tenant-a\"", keys);
    let c = Config::parse(&with(&format!(
        "num_queues = 2\nworkers = 2\ncpu_affinity = [{first}, {first}]"
    )))
    .unwrap();
    assert_eq!(c.volumes[0].cpu_affinity, Some(vec![first, first]));
    assert_eq!(c.volumes[1].cpu_affinity, None, "absent: not pinned");
    let e = err_of(&with("cpu_affinity = []"));
    assert!(e.contains("\"a\".cpu_affinity: names no CPU"), "{e}");
    let e = err_of(&with(&format!("cpu_affinity = [{first}, {first}]")));
    assert!(
        e.contains("\"a\".cpu_affinity: names 2 CPUs for 1 worker(s)"),
        "{e}"
    );
    // Whether the machine has the CPU is asked when a volume is added, not of the config.
    assert!(Config::parse(&with("cpu_affinity = [1023]")).is_ok());
    let e = err_of(&with("cpu_affinity = [1024]"));
    assert!(
        e.contains("\"a\".cpu_affinity: CPU 1024: CPU numbers go up to 1023"),
        "{e}"
    );
    let e = err_of(&with("cpu_affinity = [70000]"));
    assert!(e.contains("cpu_affinity"), "{e}");
}

#[test]
fn bad_queue_geometry_and_serial_are_refused() {
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "queue_size = 100"));
    assert!(e.contains("\"a\".queue_size"), "{e}");
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "num_queues = 0"));
    assert!(e.contains("\"a\".num_queues"), "{e}");
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "num_queues = 2\nworkers = 3"));
    assert!(
        e.contains("\"a\".workers: must be 1..=num_queues (2) (got 3)"),
        "{e}"
    );
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "workers = 0"));
    assert!(e.contains("\"a\".workers"), "{e}");
    let e = err_of(&BASE.replace("[device]", "[device]\npoll_max = \"2ms\""));
    assert!(
        e.contains("device.poll_max: must be at most 1000us (got 2000us)"),
        "{e}"
    );
    let e = err_of(&BASE.replace("group = \"tenant-a\"", "serial = \"123456789012345678901\""));
    assert!(e.contains("\"a\".serial"), "{e}");
}

#[test]
fn file_device_needs_a_path() {
    let e = err_of(&BASE.replace("path = \"disk.img\"", ""));
    assert!(e.contains("device.path"), "{e}");
    let null = BASE.replace("path = \"disk.img\"", "kind = \"null\"");
    assert!(Config::parse(&null).is_ok());
}

#[test]
fn volume_and_group_names_are_restricted_to_a_safe_set() {
    for (bad, why) in [
        ("a/b", "'/' is not allowed"),
        ("a\\u0000b", "'\\0' is not allowed"),
        ("a b", "' ' is not allowed"),
        ("", "1 to 64 characters"),
        (".hidden", "must not start with"),
        ("-x", "must not start with"),
    ] {
        let e = err_of(&BASE.replace("name = \"a\"", &format!("name = \"{bad}\"")));
        assert!(e.contains("volume[0]") && e.contains(why), "{bad:?}: {e}");
        let e = err_of(&BASE.replace("name = \"tenant-a\"", &format!("name = \"{bad}\"")));
        assert!(e.contains("group[0]") && e.contains(why), "{bad:?}: {e}");
    }
    let long = "v".repeat(65);
    assert!(
        err_of(&BASE.replace("name = \"a\"", &format!("name = \"{long}\""))).contains("1 to 64")
    );
    let ok = BASE.replace("name = \"a\"", "name = \"vm-17.disk_0\"");
    Config::parse(&ok).unwrap();
}

#[test]
fn class_and_reserve_parse_and_errors_name_the_key() {
    let with = |extra: &str| {
        BASE.replace(
            "group = \"tenant-a\"",
            &format!("group = \"tenant-a\"\n{extra}"),
        )
    };
    let c = Config::parse(&with(
        "class = \"background\"\nreserve = { iops = 500, bps = \"20MiB\" }",
    ))
    .unwrap();
    assert_eq!(c.volumes[0].class, crate::qos::Class::Background);
    let r = c.volumes[0].reserve.unwrap();
    assert_eq!((r.iops, r.bps.0), (500, 20 << 20));
    assert_eq!(c.volumes[1].class, crate::qos::Class::Normal);
    let e = err_of(&with("reserve = { pct = 150.0 }"));
    assert!(e.contains("volume[0] \"a\".reserve.pct"), "{e}");
    let e = err_of(&with("class = \"bulk\""));
    assert!(e.contains("class") && e.contains("background"), "{e}");
    let e = err_of(&with("class = \"latency\""));
    assert!(e.contains("volume[0] \"a\".latency_target"), "{e}");
}

#[test]
fn a_group_may_be_latency_class_with_a_target() {
    let group = |extra: &str| BASE.replace("weight = 200", &format!("weight = 200\n{extra}"));
    let c = Config::parse(&group("class = \"latency\"\nlatency_target = \"p99 2ms\"")).unwrap();
    let p = c.groups[0].policy();
    assert_eq!(p.class, crate::qos::Class::Latency);
    assert_eq!(p.latency_target.unwrap().us, 2000);
    let e = err_of(&group("class = \"latency\""));
    assert!(
        e.contains("group[0] \"tenant-a\".latency_target") && e.contains("p99 2ms"),
        "{e}"
    );
}

#[test]
fn op_caps_parse_and_errors_name_the_key() {
    let with = |extra: &str| {
        BASE.replace(
            "group = \"tenant-a\"",
            &format!("group = \"tenant-a\"\n{extra}"),
        )
    };
    let c = Config::parse(&with(
        "op_caps = { flush = { iops = 200 }, discard = { bps = \"100MiB\" } }",
    ))
    .unwrap();
    let op = c.volumes[0].op_caps.unwrap();
    assert_eq!(op.flush.unwrap().iops, 200);
    assert_eq!(op.discard.unwrap().bps.0, 100 << 20);
    let e = err_of(&with("op_caps = { flush = { read_iops = 5 } }"));
    assert!(e.contains("volume[0] \"a\".op_caps.flush"), "{e}");
    let e = err_of(&with(
        "op_caps = { discard = { iops = 5, burst_iops = 1 } }",
    ));
    assert!(
        e.contains("volume[0] \"a\".op_caps.discard.burst_iops"),
        "{e}"
    );
    assert!(Config::parse(&with("op_caps = { read = { iops = 5 } }")).is_err());
}

#[test]
fn a_volume_with_its_own_file_is_checked_against_the_device_and_the_others() {
    let with_path = |extra: &str| {
        BASE.replace(
            "offset = \"256MiB\"\nsize = \"256MiB\"",
            &format!("path = \"b.img\"\nsize = \"256MiB\"\n{extra}"),
        )
    };
    let c = Config::parse(&with_path("")).unwrap();
    assert_eq!(
        c.volumes[1].path.as_deref(),
        Some(std::path::Path::new("b.img"))
    );
    // Its range is not on the device: a device of 256 MiB holds volume a alone.
    c.validate_layout(256 << 20, 512).unwrap();
    assert!(c.describe(None, None).contains("file b.img"));

    let e = err_of(&with_path("offset = \"1MiB\""));
    assert!(
        e.contains("volume[1] \"b\".offset") && e.contains("not with path"),
        "{e}"
    );
    let e = err_of(&with_path("").replace("path = \"b.img\"", "path = \"disk.img\""));
    assert!(
        e.contains("volume[1] \"b\".path") && e.contains("device.path"),
        "{e}"
    );
    let e = err_of(&with_path("").replace(
        "path = \"b.img\"\nsize = \"256MiB\"",
        "path = \"b.img\"\nsize = 1000",
    ));
    assert!(
        e.contains("volume[1] \"b\".size") && e.contains("512"),
        "{e}"
    );
    let e = err_of(
        &(with_path("") + "\n[[volume]]\nname = \"c\"\nsocket = \"c.sock\"\npath = \"b.img\"\nsize = \"1MiB\"\n"),
    );
    assert!(
        e.contains("volume[2] \"c\".path") && e.contains("already used"),
        "{e}"
    );
    let null = with_path("").replace(
        "path = \"disk.img\"\ncreate_size = \"1GiB\"",
        "kind = \"null\"",
    );
    let e = err_of(&null);
    assert!(
        e.contains("volume[1] \"b\".path") && e.contains("null"),
        "{e}"
    );
}
