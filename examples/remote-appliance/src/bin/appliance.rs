//! `appliance --dir DIR --token T [--reader-token R] [--listen ADDR]
//! [--busy-every N] [--slow-every N --slow-ms MS]`: the example's storage
//! appliance. It prints `appliance listening on ADDR` once it serves.

use std::io::Write;
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use remote_appliance::appliance::{Appliance, Settings};
use remote_appliance::http;

/// Connections served at once, at most.
const MOST_CONNECTIONS: usize = 64;

fn settings(args: Vec<String>) -> Result<(Settings, String), String> {
    let mut s = Settings::default();
    let mut listen = "127.0.0.1:0".to_string();
    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        let number = || {
            value
                .parse::<u64>()
                .map_err(|_| format!("{flag} {value:?}: not a number"))
        };
        match flag.as_str() {
            "--dir" => s.dir = value.clone().into(),
            "--token" => s.tokens.push(value.clone()),
            "--reader-token" => s.readers.push(value.clone()),
            "--listen" => listen = value.clone(),
            "--busy-every" => s.busy_every = number()?,
            "--slow-every" => s.slow_every = number()?,
            "--slow-ms" => s.slow = Duration::from_millis(number()?),
            _ => return Err(format!("unknown flag {flag:?}")),
        }
    }
    if s.dir.as_os_str().is_empty() || s.tokens.is_empty() {
        return Err("--dir and --token are required".into());
    }
    Ok((s, listen))
}

fn main() -> ExitCode {
    let (settings, listen) = match settings(std::env::args().skip(1).collect()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("appliance: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = Appliance::open(settings).and_then(|a| {
        let listener = TcpListener::bind(&listen)?;
        println!("appliance listening on {}", listener.local_addr()?);
        std::io::stdout().flush()?;
        let appliance = Arc::new(a);
        // One thread per connection, at most MOST_CONNECTIONS at once: a
        // client that opens more is answered 503 and closed.
        let open = Arc::new(AtomicUsize::new(0));
        for mut stream in listener.incoming().flatten() {
            if open.fetch_add(1, Ordering::SeqCst) >= MOST_CONNECTIONS {
                open.fetch_sub(1, Ordering::SeqCst);
                let busy = br#"{"error":"busy: too many connections, try again"}"#;
                let _ = http::write(&mut stream, "HTTP/1.1 503 Service Unavailable", &[], busy);
                continue;
            }
            let (a, open) = (appliance.clone(), open.clone());
            std::thread::spawn(move || {
                a.serve(stream);
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
        Ok(())
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("appliance: {e}");
            ExitCode::FAILURE
        }
    }
}
