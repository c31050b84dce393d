//! `capw lb` as a process: connections reach the healthy backends round-robin, a backend that
//! stops answering is taken out, one added to the backends file is taken in, and the banner comes
//! only once the socket is bound.

// Test code: a failed step fails the test where it happened (workspace lints deny these elsewhere).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::KillOnDrop;

/// A backend that answers every connection with its own name.
fn backend(name: &'static str) -> (String, std::sync::mpsc::Sender<()>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().expect("addr").to_string();
    l.set_nonblocking(true).expect("nonblocking");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        loop {
            if rx.try_recv().is_ok() {
                return;
            }
            match l.accept() {
                Ok((mut s, _)) => {
                    let _ = s.write_all(name.as_bytes());
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    (addr, tx)
}

fn ask(lb: &str) -> String {
    let mut s = TcpStream::connect(lb).expect("connect to the lb");
    // Nothing to send: closing our half lets the proxy finish once the backend has answered.
    let _ = s.shutdown(std::net::Shutdown::Write);
    s.set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn balances_over_healthy_backends_and_follows_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, stop_a) = backend("a");
    let (b, _stop_b) = backend("b");
    let file = dir.path().join("backends");
    std::fs::write(&file, format!("{a}\n{b}\n")).expect("backends");
    // Port 0: the lb binds a free port itself and names it in its banner, so there is no window
    // in which another process could take a port picked here.
    let mut lb = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_capw"))
            .args([
                "lb",
                "--listen",
                "127.0.0.1:0",
                "--check-interval-ms",
                "200",
            ])
            .arg("--backends-file")
            .arg(&file)
            .stdout(Stdio::piped())
            .spawn()
            .expect("capw lb starts"),
    );
    let mut line = String::new();
    BufReader::new(lb.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("banner");
    let listen = line
        .trim()
        .strip_prefix("capw lb listening on ")
        .unwrap_or_else(|| panic!("banner names the bound address: {line:?}"))
        .to_string();
    // The banner comes after the bind: the first connection must be accepted, not refused.
    assert!(
        TcpStream::connect(&listen).is_ok(),
        "capw lb said it was listening on {listen} before it was"
    );

    until("both backends to answer", || {
        let seen: Vec<String> = (0..6).map(|_| ask(&listen)).collect();
        seen.iter().any(|s| s == "a") && seen.iter().any(|s| s == "b")
    });
    // a stops: everything goes to b.
    stop_a.send(()).expect("stop a");
    until("a to be taken out", || (0..6).all(|_| ask(&listen) == "b"));
    // c is added to the file: it is taken in.
    let (c, _stop_c) = backend("c");
    std::fs::write(&file, format!("{a}\n{b}\n{c}\n")).expect("backends");
    until("c to be taken in", || (0..6).any(|_| ask(&listen) == "c"));
}
