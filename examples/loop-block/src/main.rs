//! `loop-block [--endpoint unix:///csi/csi.sock] [--node-id N] [--state-dir D] [--kubelet-dir D] [--http-endpoint :9808]`

use std::process::ExitCode;

use loop_block::{LoopBlock, NAME};
use volplane::{Driver, Flags};

fn main() -> ExitCode {
    volplane::init_logging("info");
    let served = Flags::from_env().and_then(|flags| {
        let storage = flags
            .state_dir_or(format!("/var/lib/{NAME}"))
            .join("volumes");
        Driver::new(NAME, LoopBlock::new(&storage))
            .version(env!("CARGO_PKG_VERSION"))
            .flags(&flags)
            .storage_dir(storage)
            .serve()
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loop-block: {e}");
            ExitCode::FAILURE
        }
    }
}
