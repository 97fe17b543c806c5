//! `remote-appliance --appliance HOST:PORT --images DIR [--token-file FILE]`
//! and volplane's flags (`--endpoint`, `--node-id`, `--state-dir`,
//! `--kubelet-dir`, `--http-endpoint`, `--controller`, `--node`).

use std::path::PathBuf;
use std::process::ExitCode;

use remote_appliance::{NAME, RemoteAppliance};
use volplane::{Driver, Error, Flags};

const OWN: &str = "own flags: --appliance HOST:PORT  --images DIR  [--token-file FILE]";

/// The driver's own flags.
struct Own {
    appliance: String,
    images: PathBuf,
    reader: Option<String>,
}

fn own(rest: Vec<String>) -> Result<Own, Error> {
    let (mut appliance, mut images, mut token_file) = (None, None, None);
    let mut args = rest.into_iter();
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let slot = match name.as_str() {
            "--appliance" => &mut appliance,
            "--images" => &mut images,
            "--token-file" => &mut token_file,
            _ => {
                return Err(Error::Setup(format!(
                    "unknown argument {arg:?}\n{OWN}\n{}",
                    volplane::USAGE
                )));
            }
        };
        *slot = Some(
            inline
                .or_else(|| args.next())
                .ok_or_else(|| Error::Setup(format!("{name} needs a value\n{OWN}")))?,
        );
    }
    let appliance =
        appliance.ok_or_else(|| Error::Setup(format!("--appliance is required\n{OWN}")))?;
    let reader = match token_file {
        Some(f) => Some(
            std::fs::read_to_string(&f)
                .map_err(|e| Error::Setup(format!("--token-file {f}: {e}")))?
                .trim()
                .to_string(),
        ),
        None => None,
    };
    let images = PathBuf::from(images.unwrap_or_else(|| format!("/var/lib/{NAME}/images")));
    Ok(Own {
        appliance,
        images,
        reader,
    })
}

fn main() -> ExitCode {
    volplane::init_logging("info");
    let served = Flags::parse_known(std::env::args().skip(1)).and_then(|(flags, rest)| {
        let own = own(rest)?;
        let backend = RemoteAppliance::new(&own.appliance, own.reader, &own.images);
        Driver::new(NAME, backend)
            .version(env!("CARGO_PKG_VERSION"))
            .flags(&flags)
            .storage_dir(own.images)
            .serve()
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("remote-appliance: {e}");
            ExitCode::FAILURE
        }
    }
}
