//! The lab as a background process (`lab up`) and its control socket: each
//! client command is one JSON line; the answer is every line the lab prints
//! while the command takes effect, then a last line `\0OK` or `\0ERR reason`.

use std::io::{BufRead, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::net::UnixListener;

use crate::world::Command;
use crate::{Lab, LabConfig, LabError, Layout};

const END: char = '\0';

/// Runs the lab until SIGTERM or SIGINT, serving its control socket.
pub async fn serve(config: LabConfig) -> Result<(), LabError> {
    let lab = Lab::start(config).await?;
    let layout = lab.layout.clone();
    let socket = layout.control_socket();
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket)
        .map_err(|e| LabError::Setup(format!("listen on {}: {e}", socket.display())))?;
    let lab = std::sync::Arc::new(lab);
    let stop = volplane_tokio::termination().map_err(|e| LabError::Setup(format!("{e}")))?;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            conn = listener.accept() => {
                if let Ok((stream, _)) = conn {
                    tokio::spawn(client(lab.clone(), stream));
                }
            }
            _ = &mut stop => break,
        }
    }
    let _ = std::fs::remove_file(&socket);
    drop(listener);
    // Clients hold clones only while a command runs.
    for _ in 0..100 {
        if std::sync::Arc::strong_count(&lab) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    if let Ok(lab) = std::sync::Arc::try_unwrap(lab) {
        lab.down().await;
    }
    Ok(())
}

async fn client(lab: std::sync::Arc<Lab>, stream: tokio::net::UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    if tokio::io::BufReader::new(read)
        .read_line(&mut line)
        .await
        .is_err()
    {
        return;
    }
    let command = match serde_json::from_str::<Command>(&line) {
        Ok(c) => c,
        Err(e) => {
            let _ = write
                .write_all(format!("{END}ERR bad request {:?}: {e}\n", line.trim()).as_bytes())
                .await;
            return;
        }
    };
    let writes = command.writes();
    let mut lines = lab.subscribe();
    let text = match lab.with(|w, t| w.command(t, command)) {
        Ok(text) => text,
        Err(e) => {
            let _ = write.write_all(format!("{END}ERR {e}\n").as_bytes()).await;
            return;
        }
    };
    if write
        .write_all(format!("{text}\n").as_bytes())
        .await
        .is_err()
    {
        return;
    }
    if writes {
        // Show what the command set off until the cluster is quiet.
        let settle = lab.settle(Duration::from_secs(2), Duration::from_secs(120));
        tokio::pin!(settle);
        loop {
            tokio::select! {
                _ = &mut settle => break,
                Ok(l) = lines.recv() => {
                    if write.write_all(format!("{l}\n").as_bytes()).await.is_err() {
                        return;
                    }
                }
            }
        }
        while let Ok(l) = lines.try_recv() {
            let _ = write.write_all(format!("{l}\n").as_bytes()).await;
        }
    }
    let _ = write.write_all(format!("{END}OK\n").as_bytes()).await;
}

/// Sends `request` to the lab at `layout.root`, printing what it says.
pub fn send(layout: &Layout, request: &Command) -> Result<(), LabError> {
    let socket = layout.control_socket();
    let mut stream = UnixStream::connect(&socket).map_err(|e| {
        LabError::Setup(format!(
            "no lab is running at {} ({}: {e}); start one with `volplane lab up --root {}`",
            layout.root.display(),
            socket.display(),
            layout.root.display()
        ))
    })?;
    let json = serde_json::to_string(request).expect("requests serialize");
    stream
        .write_all(format!("{json}\n").as_bytes())
        .map_err(|e| LabError::Setup(format!("{}: {e}", socket.display())))?;
    let mut out = std::io::stdout().lock();
    for line in std::io::BufReader::new(stream).lines() {
        let line = line.map_err(|e| LabError::Setup(format!("{}: {e}", socket.display())))?;
        if let Some(end) = line.strip_prefix(END) {
            return match end.strip_prefix("ERR ") {
                Some(e) => Err(LabError::Setup(e.to_string())),
                None => Ok(()),
            };
        }
        if writeln!(out, "{line}").is_err() {
            // The reader went away (as `| head` does); the command still ran.
            return Ok(());
        }
    }
    Err(LabError::Setup(
        "the lab closed the connection before answering".into(),
    ))
}
