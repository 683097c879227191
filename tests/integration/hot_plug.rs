//! Adding and removing volumes and groups at run time: over REST, while
//! another volume keeps serving a verifying workload, with the refusals an operator
//! needs (409 while connected, a full device, an empty group only) and the changes kept
//! across a restart.

use crate::client::{pattern, Client, Op};
use crate::daemon::{
    config, control_call, control_get, ctl, volume, wait_frontends, DaemonProcess,
};
use serde_json::json;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;
const CONTROL: &str = "[control]\nsocket = \"control.sock\"\n";

/// A volume is added, used and removed 20 times (on a range the daemon allocates, and
/// every fourth time on a file of its own) while another volume runs writes verified by
/// reads: the steady volume sees no error, and no request of it waits long.
#[test]
fn volumes_come_and_go_while_another_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let d = DaemonProcess::start_in(dir, &config(CONTROL, &volume("steady", 0, 8, "")));
    let stop = Arc::new(AtomicBool::new(false));
    let steady = {
        let (socket, stop) = (d.socket("steady"), stop.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&socket, 1, MIB as usize);
            let (mut rounds, mut failures, mut slowest) = (0u64, 0u64, Duration::ZERO);
            while !stop.load(Ordering::Acquire) {
                let off = (rounds % 32) * 128 * 1024;
                let started = Instant::now();
                if !c.write_and_verify(off, &pattern(off, 64 * 1024, rounds as u8)) {
                    failures += 1;
                }
                slowest = slowest.max(started.elapsed());
                rounds += 1;
            }
            (rounds, failures, slowest)
        })
    };
    for i in 0..20u8 {
        let mut body = json!({ "name": "hot", "socket": "hot.sock", "size": "4MiB" });
        if i % 4 == 3 {
            body["path"] = json!("images/hot.img");
        }
        let (status, added) = control_call(&d, "POST", "/v1/volumes", Some(&body));
        assert_eq!(status, 201, "round {i}: {added}");
        if i % 4 == 3 {
            assert_eq!(added["path"], "images/hot.img");
        } else {
            // First fit after the steady volume, on a 1 MiB boundary.
            assert_eq!(added["offset"], 8 * MIB, "round {i}: {added}");
        }
        let mut hot = Client::connect(&d.socket("hot"), 1, MIB as usize);
        assert_eq!(hot.capacity, 4 * MIB);
        if i % 4 != 3 {
            // The range held the last round's data: an allocated range is zeroed first.
            assert_eq!(
                hot.run(Op::Read {
                    off: MIB,
                    len: 256 << 10,
                    buf: 0
                }),
                0
            );
            assert!(
                hot.buf()[..256 << 10].iter().all(|&b| b == 0),
                "round {i}: old data shows"
            );
        }
        let data = pattern(MIB, 256 << 10, i);
        assert!(hot.write_and_verify(MIB, &data), "round {i}");
        if i % 2 == 0 {
            let (status, refused) = control_call(&d, "DELETE", "/v1/volumes/hot", None);
            assert_eq!(status, 409, "round {i}: {refused}");
            assert!(refused["error"].as_str().unwrap().contains("connected"));
            drop(hot);
            wait_frontends(&d, "hot", 0);
            let (status, _) = control_call(&d, "DELETE", "/v1/volumes/hot", None);
            assert_eq!(status, 204, "round {i}");
        } else {
            // Forced while connected: the connection is closed first.
            let (status, _) = control_call(&d, "DELETE", "/v1/volumes/hot?force=true", None);
            assert_eq!(status, 204, "round {i}");
            drop(hot);
        }
        assert!(
            !d.path("hot.sock").exists() && !d.path("hot.sock.handover").exists(),
            "round {i}: the socket files are gone"
        );
        let (status, _) = control_call(&d, "GET", "/v1/volumes/hot", None);
        assert_eq!(status, 404);
    }
    stop.store(true, Ordering::Release);
    let (rounds, failures, slowest) = steady.join().unwrap();
    eprintln!("steady volume: {rounds} verified writes, slowest {slowest:?}");
    assert_eq!(failures, 0, "the steady volume saw errors");
    assert!(
        rounds >= 20,
        "the steady volume made little progress: {rounds}"
    );
    // Generous for a 2-core machine running the suite: a pause would be the whole
    // add/remove (a drain, a join), seconds.
    assert!(
        slowest < Duration::from_secs(1),
        "a steady request took {slowest:?}"
    );
}

/// Added groups and volumes, and removed ones, are kept in the state file: after a
/// restart the daemon serves what it served before, with the data written to the added
/// volume. The refusals name the field or say what is in the way, and change nothing.
#[test]
fn added_and_removed_nodes_survive_a_restart() {
    let volumes = volume("a", 0, 8, "") + &volume("b", 8, 8, "");
    let d = DaemonProcess::start(&config(CONTROL, &volumes));
    let call = |method: &str, path: &str, body: serde_json::Value| {
        let body = (!body.is_null()).then_some(body);
        control_call(&d, method, path, body.as_ref())
    };

    let (status, group) = call(
        "POST",
        "/v1/groups",
        json!({ "name": "tenant", "weight": 200 }),
    );
    assert_eq!(status, 201, "{group}");
    assert_eq!(group["weight"]["value"], 200);
    let c = json!({ "name": "c", "socket": "c.sock", "size": "4MiB", "group": "tenant", "weight": 300 });
    let (status, added) = call("POST", "/v1/volumes", c.clone());
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["offset"], 16 * MIB);
    assert_eq!(added["group"]["value"], "tenant");

    refused_additions_name_their_field(&d, &c);
    assert!(!d.path("d.sock").exists());
    let (status, e) = call("DELETE", "/v1/groups/tenant", serde_json::Value::Null);
    assert_eq!(status, 409, "{e}");
    assert!(e["error"].as_str().unwrap().contains("\"c\".group"), "{e}");
    let (status, e) = call(
        "DELETE",
        "/v1/volumes/b?force=maybe",
        serde_json::Value::Null,
    );
    assert_eq!((status, e["field"].as_str()), (400, Some("force")));
    let (status, _) = call("DELETE", "/v1/volumes/b", serde_json::Value::Null);
    assert_eq!(status, 204);
    let (status, _) = call(
        "POST",
        "/v1/groups",
        json!({ "name": "empty", "parent": "tenant" }),
    );
    assert_eq!(status, 201);
    let (status, _) = call("DELETE", "/v1/groups/empty", serde_json::Value::Null);
    assert_eq!(status, 204);

    let data = pattern(0, 128 << 10, 5);
    let mut client = Client::connect(&d.socket("c"), 1, MIB as usize);
    assert!(client.write_and_verify(0, &data));
    drop(client);
    let (status, dir) = d.stop();
    assert!(status.success());

    let d = DaemonProcess::start_in(dir, &config(CONTROL, &volumes));
    let list = control_get(&d, "/v1/volumes");
    let names: Vec<&str> = list["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "c"]);
    let c = control_get(&d, "/v1/volumes/c");
    assert_eq!(
        (c["offset"].as_u64(), c["weight"]["value"].as_u64()),
        (Some(16 * MIB), Some(300))
    );
    assert_eq!(c["group"]["value"], "tenant");
    let groups = control_get(&d, "/v1/groups");
    assert_eq!(groups["groups"].as_array().unwrap().len(), 1, "{groups}");
    assert!(
        !d.path("b.sock").exists(),
        "the removed volume stays removed"
    );
    let mut client = Client::connect(&d.socket("c"), 1, MIB as usize);
    assert_eq!(
        client.run(Op::Read {
            off: 0,
            len: data.len(),
            buf: 0
        }),
        0
    );
    assert!(
        client.buf()[..data.len()] == data[..],
        "the added volume kept its data"
    );
}

/// Adding a volume that is wrong in one field is refused with the right status, naming the
/// field. `taken`: a volume already added.
fn refused_additions_name_their_field(d: &DaemonProcess, taken: &serde_json::Value) {
    // Volume "d", 4 MiB, with `extra` keys.
    let d_with = |extra: serde_json::Value| {
        let mut body = json!({ "name": "d", "socket": "d.sock", "size": "4MiB" });
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        body
    };
    let refusals = [
        (taken.clone(), 400, "name"),
        (d_with(json!({ "offset": "4MiB" })), 400, "offset"),
        (d_with(json!({ "socket": "a.sock" })), 400, "socket"),
        (d_with(json!({ "colour": 1 })), 400, "colour"),
        (d_with(json!({ "group": "nope" })), 400, "group"),
        (d_with(json!({ "size": "64MiB" })), 409, ""),
        (d_with(json!({ "name": "tenant" })), 400, "name"),
        // The device's own file under another name.
        (d_with(json!({ "path": "./disk.img" })), 400, "path"),
        // A CPU the daemon may not run on.
        (
            d_with(json!({ "cpu_affinity": [1023] })),
            400,
            "cpu_affinity",
        ),
    ];
    for (body, want, field) in refusals {
        let (status, e) = control_call(d, "POST", "/v1/volumes", Some(&body));
        assert_eq!(status, want, "{body}: {e}");
        if !field.is_empty() {
            assert_eq!(e["field"], field, "{body}: {e}");
        }
    }
}

/// `ctl` adds and removes groups and volumes as the REST API does.
#[test]
fn ctl_adds_and_removes_groups_and_volumes() {
    let d = DaemonProcess::start(&config(CONTROL, &volume("a", 0, 8, "")));
    // A list passes as a list (a string would be refused).
    let cpu = vhost_iocost::cpu_affinity::allowed().unwrap()[0];
    let cpu_affinity = format!("cpu_affinity=[{cpu}]");
    assert_eq!(
        ctl(&d, &["add-group", "g", "--weight", "200"]),
        "group g: added under root\n"
    );
    let out = ctl(
        &d,
        &[
            "add-volume",
            "v",
            "--vhost-socket",
            "v.sock",
            "--size",
            "4MiB",
            "--group",
            "g",
            "num_queues=2",
            "read_only=true",
            &cpu_affinity,
        ],
    );
    assert_eq!(
        out,
        format!("volume v: added at offset {}, socket v.sock\n", 8 * MIB)
    );
    let v = control_get(&d, "/v1/volumes/v");
    assert_eq!(
        (v["group"]["value"].as_str(), v["read_only"].as_bool()),
        (Some("g"), Some(true))
    );
    assert_eq!(
        (&v["num_queues"], &v["workers"], &v["cpu_affinity"]),
        (&json!(2), &json!(1), &json!([cpu])),
        "{v}"
    );
    let client = Client::connect_read_only(&d.socket("v"), MIB as usize);
    assert_eq!(client.capacity, 4 * MIB);
    drop(client);
    wait_frontends(&d, "v", 0);
    assert_eq!(
        ctl(&d, &["resize", "v", "6MiB"]),
        format!("volume v: {} bytes\n", 6 * MIB)
    );
    assert_eq!(ctl(&d, &["remove-volume", "v"]), "volume v: removed\n");
    assert_eq!(ctl(&d, &["remove-group", "g"]), "group g: removed\n");
    assert_eq!(control_get(&d, "/v1/groups")["groups"], json!([]));
}

/// A group moves with its volumes (`PATCH {"parent": ...}`), never inside itself; a volume
/// takes `parent` as its group too; a group its volumes moved out of can be removed, and
/// all of it holds after a restart.
#[test]
fn groups_move_under_other_groups_and_stay_there() {
    let groups = "[[group]]\nname = \"dc\"\n[[group]]\nname = \"t\"\nparent = \"dc\"\n";
    let volumes = format!("{groups}{}", volume("v", 0, 8, "group = \"t\""));
    let d = DaemonProcess::start(&config(CONTROL, &volumes));
    let patch = |d: &DaemonProcess, path: &str, body: serde_json::Value| {
        control_call(d, "PATCH", path, Some(&body))
    };
    let (status, e) = patch(&d, "/v1/groups/dc", json!({ "parent": "t" }));
    assert_eq!((status, e["field"].as_str()), (400, Some("parent")), "{e}");
    assert!(e["error"].as_str().unwrap().contains("cycle"), "{e}");
    let (status, _) = control_call(&d, "POST", "/v1/groups", Some(&json!({ "name": "dc2" })));
    assert_eq!(status, 201);
    let (status, t) = patch(&d, "/v1/groups/t", json!({ "parent": "dc2" }));
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["parent"], "dc2");
    assert_eq!(t["volumes"], json!(["v"]));
    let (status, e) = patch(&d, "/v1/groups/t", json!({ "parent": "nowhere" }));
    assert_eq!((status, e["field"].as_str()), (400, Some("parent")), "{e}");
    let (status, v) = patch(&d, "/v1/volumes/v", json!({ "parent": "dc" }));
    assert_eq!(
        (status, v["group"]["value"].as_str()),
        (200, Some("dc")),
        "{v}"
    );
    // t is empty now that v moved out; dc is not.
    let (status, e) = control_call(&d, "DELETE", "/v1/groups/dc", None);
    assert_eq!(status, 409, "{e}");
    let (status, e) = control_call(&d, "DELETE", "/v1/groups/t", None);
    assert_eq!(status, 204, "{e}");
    let (status, dir) = d.stop();
    assert!(status.success());

    let d = DaemonProcess::start_in(dir, &config(CONTROL, &volumes));
    let (status, _) = control_call(&d, "GET", "/v1/groups/t", None);
    assert_eq!(status, 404, "the removed group stays removed");
    assert_eq!(control_get(&d, "/v1/groups/dc2")["parent"], "root");
    assert_eq!(control_get(&d, "/v1/volumes/v")["group"]["value"], "dc");
}
