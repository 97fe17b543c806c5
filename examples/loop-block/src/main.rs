//! `loop-block [--endpoint unix:///csi/csi.sock] [--node-id N] [--state-dir D] [--kubelet-dir D] [--http-endpoint :9808]`

use std::process::ExitCode;

use loop_block::{LoopBlock, NAME};
use volplane::Driver;

fn main() -> ExitCode {
    volplane::init_logging("info");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        let at = args.iter().position(|a| a == &format!("--{name}"))?;
        args.get(at + 1).cloned()
    };
    let state = flag("state-dir").unwrap_or(format!("/var/lib/{NAME}"));
    let storage = format!("{state}/volumes");
    let mut driver = Driver::new(NAME, LoopBlock::new(&storage))
        .version(env!("CARGO_PKG_VERSION"))
        .state_dir(&state)
        .storage_dir(&storage);
    if let Some(e) = flag("endpoint") {
        driver = driver.endpoint(&e);
    }
    if let Some(id) = flag("node-id") {
        driver = driver.node_id(&id);
    }
    if let Some(dir) = flag("kubelet-dir") {
        driver = driver.kubelet_dir(dir);
    }
    if let Some(address) = flag("http-endpoint") {
        driver = driver.http_endpoint(&address);
    }
    if let Err(e) = driver.serve() {
        eprintln!("loop-block: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
