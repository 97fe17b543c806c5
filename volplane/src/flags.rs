//! [`Flags`]: the command-line flags every volplane driver can take, so
//! that drivers built on volplane are started alike.

use std::path::PathBuf;

use crate::Error;

/// The usage line for [`Flags`].
pub const USAGE: &str = "flags: --endpoint unix:///PATH  --node-id NAME  --state-dir DIR  \
                         --kubelet-dir DIR  --http-endpoint [HOST]:PORT  (each also as --flag=value)";

/// `--endpoint`, `--node-id`, `--state-dir`, `--kubelet-dir` and
/// `--http-endpoint`, as [`Driver`](crate::Driver) takes them. Each is
/// optional; [`Driver::flags`](crate::Driver::flags) applies those given.
///
/// ```
/// let f = volplane::Flags::parse(["--state-dir", "/var/lib/x", "--endpoint=unix:///x.sock"])?;
/// assert_eq!(f.state_dir_or("/default"), std::path::PathBuf::from("/var/lib/x"));
/// # Ok::<(), volplane::Error>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    /// `--endpoint`: where to listen.
    pub endpoint: Option<String>,
    /// `--node-id`: this node's id.
    pub node_id: Option<String>,
    /// `--state-dir`: the state directory.
    pub state_dir: Option<PathBuf>,
    /// `--kubelet-dir`: the kubelet directory.
    pub kubelet_dir: Option<PathBuf>,
    /// `--http-endpoint`: `/metrics` and `/healthz`.
    pub http_endpoint: Option<String>,
}

impl Flags {
    /// The flags of this process (its arguments after the program name).
    pub fn from_env() -> Result<Flags, Error> {
        Flags::parse(std::env::args().skip(1))
    }

    /// Parses `--flag value` and `--flag=value`; anything else is an
    /// error that names it and lists the flags.
    pub fn parse<I, S>(args: I) -> Result<Flags, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut flags = Flags::default();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            let known = [
                "--endpoint",
                "--node-id",
                "--state-dir",
                "--kubelet-dir",
                "--http-endpoint",
            ];
            if !known.contains(&name.as_str()) {
                return Err(usage(&format!("unknown argument {arg:?}")));
            }
            let Some(value) = inline.or_else(|| args.next()) else {
                return Err(usage(&format!("{name} needs a value")));
            };
            match name.as_str() {
                "--endpoint" => flags.endpoint = Some(value),
                "--node-id" => flags.node_id = Some(value),
                "--state-dir" => flags.state_dir = Some(value.into()),
                "--kubelet-dir" => flags.kubelet_dir = Some(value.into()),
                _ => flags.http_endpoint = Some(value),
            }
        }
        Ok(flags)
    }

    /// `--state-dir`, or `default` when it was not given.
    pub fn state_dir_or(&self, default: impl Into<PathBuf>) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| default.into())
    }
}

fn usage(why: &str) -> Error {
    Error::Setup(format!("{why}\n{USAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_and_clear_refusals() {
        let f = Flags::parse([
            "--endpoint",
            "unix:///a.sock",
            "--node-id=n1",
            "--kubelet-dir",
            "/k",
        ])
        .unwrap();
        assert_eq!(f.endpoint.as_deref(), Some("unix:///a.sock"));
        assert_eq!(f.node_id.as_deref(), Some("n1"));
        assert_eq!(f.kubelet_dir, Some(PathBuf::from("/k")));
        assert_eq!(f.state_dir_or("/s"), PathBuf::from("/s"));
        let e = Flags::parse(["--volumes", "/v"]).unwrap_err().to_string();
        assert!(
            e.starts_with("unknown argument \"--volumes\"\nflags: --endpoint"),
            "{e}"
        );
        let e = Flags::parse(["--endpoint"]).unwrap_err().to_string();
        assert!(e.starts_with("--endpoint needs a value"), "{e}");
    }
}
