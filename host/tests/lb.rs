//! `capw lb` as a process: every connection reaches one healthy backend, the primary, while it
//! stays healthy (each capw control plane serves its own store); when it stops answering
//! another takes over; one added to the backends file is taken in as a standby; and the banner
//! comes only once the socket is bound.

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
fn one_primary_serves_until_it_fails_and_the_file_is_followed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, stop_a) = backend("a");
    let (b, stop_b) = backend("b");
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

    // One primary: every connection reaches the same backend.
    until("a backend to answer", || !ask(&listen).is_empty());
    let primary = ask(&listen);
    assert!(primary == "a" || primary == "b", "{primary:?}");
    let seen: Vec<String> = (0..12).map(|_| ask(&listen)).collect();
    assert!(seen.iter().all(|s| *s == primary), "{seen:?}");
    // The primary stops: the other takes over.
    let (other, stop_primary, stop_other) = if primary == "a" {
        ("b", stop_a, stop_b)
    } else {
        ("a", stop_b, stop_a)
    };
    stop_primary.send(()).expect("stop the primary");
    until("the other backend to take over", || {
        (0..6).all(|_| ask(&listen) == other)
    });
    // c is added to the file: it stands by while the primary is healthy, and takes over when
    // that one stops too.
    let (c, _stop_c) = backend("c");
    std::fs::write(&file, format!("{a}\n{b}\n{c}\n")).expect("backends");
    std::thread::sleep(Duration::from_millis(600));
    let seen: Vec<String> = (0..6).map(|_| ask(&listen)).collect();
    assert!(
        seen.iter().all(|s| s == other),
        "c took traffic from a healthy primary: {seen:?}"
    );
    stop_other.send(()).expect("stop the second primary");
    until("c to take over", || (0..6).all(|_| ask(&listen) == "c"));
}
