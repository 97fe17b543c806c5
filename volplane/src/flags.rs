//! [`Flags`]: the command-line flags every volplane driver can take, so
//! that drivers built on volplane are started alike — and a driver's own
//! flags beside them ([`Flags::parse_known`]).

use std::path::PathBuf;

use crate::Error;

/// The usage line for [`Flags`].
pub const USAGE: &str = "flags: --endpoint unix:///PATH  --node-id NAME  --state-dir DIR  \
                         --kubelet-dir DIR  --http-endpoint [HOST]:PORT  (each also as --flag=value)  \
                         --controller  --node  (serve only that service)";

/// The flags that take a value.
const VALUED: [&str; 5] = [
    "--endpoint",
    "--node-id",
    "--state-dir",
    "--kubelet-dir",
    "--http-endpoint",
];

/// `--endpoint`, `--node-id`, `--state-dir`, `--kubelet-dir`,
/// `--http-endpoint`, `--controller` and `--node`, as
/// [`Driver`](crate::Driver) takes them. Each is optional;
/// [`Driver::flags`](crate::Driver::flags) applies those given.
///
/// ```
/// let f = volplane::Flags::parse(["--state-dir", "/var/lib/x", "--endpoint=unix:///x.sock"])?;
/// assert_eq!(f.state_dir_or("/default"), std::path::PathBuf::from("/var/lib/x"));
/// # Ok::<(), volplane::Error>(())
/// ```
///
/// A driver with flags of its own takes volplane's out first and parses
/// the rest itself (with clap's `try_parse_from`, or by hand):
///
/// ```
/// let args = ["--endpoint", "unix:///x.sock", "--appliance", "http://127.0.0.1:8080", "--controller"];
/// let (flags, rest) = volplane::Flags::parse_known(args)?;
/// assert!(flags.controller && !flags.node);
/// assert_eq!(rest, ["--appliance", "http://127.0.0.1:8080"]);
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
    /// `--controller`: serve the Controller service (a Deployment's
    /// driver). With neither `--controller` nor `--node`, both.
    pub controller: bool,
    /// `--node`: serve the Node service (a DaemonSet's driver).
    pub node: bool,
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
        let (flags, rest) = Flags::parse_known(args)?;
        match rest.first() {
            Some(arg) => Err(usage(&format!("unknown argument {arg:?}"))),
            None => Ok(flags),
        }
    }

    /// Takes volplane's flags out of `args` and returns the others, in
    /// their order, for the driver's own parser. A volplane flag that
    /// needs a value and has none is an error here.
    pub fn parse_known<I, S>(args: I) -> Result<(Flags, Vec<String>), Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut flags = Flags::default();
        let mut rest = Vec::new();
        let mut args = args.into_iter().map(Into::into);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--controller" => flags.controller = true,
                "--node" => flags.node = true,
                _ => {}
            }
            if arg == "--controller" || arg == "--node" {
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n.to_string(), Some(v.to_string())),
                None => (arg.clone(), None),
            };
            if !VALUED.contains(&name.as_str()) {
                rest.push(arg);
                continue;
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
        Ok((flags, rest))
    }

    /// `--state-dir`, or `default` when it was not given.
    pub fn state_dir_or(&self, default: impl Into<PathBuf>) -> PathBuf {
        self.state_dir.clone().unwrap_or_else(|| default.into())
    }

    /// The services to serve: (controller, node); both when neither flag
    /// was given.
    pub fn services(&self) -> (bool, bool) {
        if self.controller || self.node {
            (self.controller, self.node)
        } else {
            (true, true)
        }
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
        assert_eq!(f.services(), (true, true));
        let e = Flags::parse(["--volumes", "/v"]).unwrap_err().to_string();
        assert!(
            e.starts_with("unknown argument \"--volumes\"\nflags: --endpoint"),
            "{e}"
        );
        let e = Flags::parse(["--endpoint"]).unwrap_err().to_string();
        assert!(e.starts_with("--endpoint needs a value"), "{e}");
    }

    #[test]
    fn a_drivers_own_flags_are_left_in_order() {
        let (f, rest) =
            Flags::parse_known(["--token-file=/t", "--node", "--state-dir", "/s", "-v", "3"])
                .unwrap();
        assert_eq!(rest, ["--token-file=/t", "-v", "3"]);
        assert_eq!(f.state_dir, Some(PathBuf::from("/s")));
        assert_eq!(f.services(), (false, true));
        let e = Flags::parse_known(["--own", "--state-dir"]).unwrap_err();
        assert!(
            e.to_string().starts_with("--state-dir needs a value"),
            "{e}"
        );
    }
}
