//! CSI endpoints as kubelet writes them (`unix:///var/lib/kubelet/plugins/<driver>/csi.sock`)
//! and the socket-file housekeeping both runtimes do around serving.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// Why an endpoint cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "endpoint {0:?} is not a unix socket address; write it as unix:///absolute/path/csi.sock"
    )]
    /// The endpoint is not `unix://` (or a bare path).
    NotUnix(String),
    #[error("{0} exists and is not a socket; refusing to remove it (is --endpoint right?)")]
    /// Something that is not a socket is at the path: it is left alone.
    NotASocket(PathBuf),
    #[error(
        "a live process already serves {0}; refusing to take its socket (stop it first, or choose another --endpoint)"
    )]
    /// A live process serves the socket.
    InUse(PathBuf),
    #[error("{path}: {source}")]
    /// The socket's path could not be prepared.
    Io {
        /// The path.
        path: PathBuf,
        #[source]
        /// Why.
        source: std::io::Error,
    },
}

/// The socket path of `unix:///abs/path` (also `unix:/abs/path` and a bare
/// absolute path, as the sidecars accept).
pub fn socket_path(endpoint: &str) -> Result<PathBuf, EndpointError> {
    let path = endpoint
        .strip_prefix("unix://")
        .or_else(|| endpoint.strip_prefix("unix:"))
        .unwrap_or(endpoint);
    if !path.starts_with('/') || path.split('/').any(|p| p == "..") {
        return Err(EndpointError::NotUnix(endpoint.to_string()));
    }
    Ok(PathBuf::from(path))
}

/// Prepares to listen at `path`: creates its directory and removes a stale
/// socket left by an earlier run (one nobody accepts connections on). A
/// socket a live process serves, and anything that is not a socket, are
/// left alone and refused.
pub fn prepare_socket(path: &Path) -> Result<(), EndpointError> {
    let io = |source| EndpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(EndpointError::InUse(path.to_path_buf()));
            }
            tracing::info!(socket = %path.display(), "removing stale socket");
            std::fs::remove_file(path).map_err(io)
        }
        Ok(_) => Err(EndpointError::NotASocket(path.to_path_buf())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// Listens at `path` (prepared by [`prepare_socket`]), non-blocking. The
/// socket is bound and listening under a neighbouring name first and then
/// renamed into place, so whoever sees the socket at `path` — a kubelet, a
/// sidecar, a test — can connect at once: there is no moment when the file
/// exists and connections are refused.
pub fn listen(path: &Path) -> std::io::Result<std::os::unix::net::UnixListener> {
    let mut beside = path.as_os_str().to_owned();
    beside.push(format!(".{}", std::process::id()));
    let beside = PathBuf::from(beside);
    let _ = std::fs::remove_file(&beside);
    let listener = match std::os::unix::net::UnixListener::bind(&beside) {
        Ok(l) => {
            if let Err(e) = std::fs::rename(&beside, path) {
                let _ = std::fs::remove_file(&beside);
                return Err(e);
            }
            l
        }
        // A path near the 107-byte limit of a socket address has no room
        // for the suffix: bind in place.
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
            std::os::unix::net::UnixListener::bind(path)?
        }
        Err(e) => return Err(e),
    };
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Removes our socket at shutdown (only if it is still a socket).
pub fn remove_socket(path: &Path) {
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        let _ = std::fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_like_kubelet_writes_them() {
        assert_eq!(
            socket_path("unix:///var/lib/kubelet/plugins/x/csi.sock").unwrap(),
            PathBuf::from("/var/lib/kubelet/plugins/x/csi.sock")
        );
        assert_eq!(
            socket_path("unix:/csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert_eq!(
            socket_path("/csi/csi.sock").unwrap(),
            PathBuf::from("/csi/csi.sock")
        );
        assert!(socket_path("tcp://127.0.0.1:10000").is_err());
        assert!(socket_path("unix://relative.sock").is_err());
        assert!(socket_path("unix:///a/../b.sock").is_err());
    }

    #[test]
    fn prepare_removes_stale_sockets_only() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d/csi.sock");
        prepare_socket(&sock).unwrap();
        let live = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert!(matches!(
            prepare_socket(&sock),
            Err(EndpointError::InUse(_))
        ));
        assert!(sock.exists(), "a live socket is never removed");
        drop(live);
        prepare_socket(&sock).unwrap();
        assert!(!sock.exists());
        let file = dir.path().join("file");
        std::fs::write(&file, b"keep").unwrap();
        assert!(matches!(
            prepare_socket(&file),
            Err(EndpointError::NotASocket(_))
        ));
        assert!(file.exists());
    }

    #[test]
    fn a_socket_appears_listening_and_alone() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("csi.sock");
        prepare_socket(&sock).unwrap();
        let listener = listen(&sock).unwrap();
        // Connectable the moment it exists, and nothing else left beside it.
        std::os::unix::net::UnixStream::connect(&sock).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("csi.sock")]);
        drop(listener);
        // A path with no room for the neighbouring name is bound in place.
        let long = dir
            .path()
            .join("s".repeat(104 - dir.path().as_os_str().len()));
        let _in_place = listen(&long).unwrap();
        std::os::unix::net::UnixStream::connect(&long).unwrap();
    }
}
