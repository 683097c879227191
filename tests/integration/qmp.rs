//! A minimal QMP client: enough to drive a migration between two QEMU processes.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to QEMU's QMP socket at `path` (waiting up to `timeout` for QEMU to create
    /// it) and leaves capabilities negotiation mode.
    pub fn connect(path: &Path, timeout: Duration) -> Qmp {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(path) {
                Ok(s) => break s,
                Err(e) => {
                    assert!(Instant::now() < deadline, "QMP {}: {e}", path.display());
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        };
        let greeting = qmp.line();
        assert!(greeting.get("QMP").is_some(), "QMP greeting: {greeting}");
        qmp.execute("qmp_capabilities", json!({}));
        qmp
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        let n = self.reader.read_line(&mut line).expect("QMP read");
        assert!(n > 0, "QEMU closed its QMP socket");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("QMP answer {line:?}: {e}"))
    }

    /// Runs `command` and returns its `return` value; panics on an error answer.
    /// Events that arrive meanwhile are skipped.
    pub fn execute(&mut self, command: &str, arguments: Value) -> Value {
        let msg = json!({"execute": command, "arguments": arguments});
        writeln!(self.writer, "{msg}").expect("QMP write");
        loop {
            let answer = self.line();
            if let Some(r) = answer.get("return") {
                return r.clone();
            }
            if let Some(e) = answer.get("error") {
                panic!("QMP {command}: {e}");
            }
        }
    }
}
