//! Lexical path rules shared by every machine and the host layer: paths in
//! requests must be absolute, free of `..`, and lie under configured roots.
//!
//! These checks are purely lexical (no filesystem access). The host layer
//! repeats the root check against the real filesystem, resolving symlinks,
//! before it touches anything.

use crate::Status;

/// Longest path accepted in a request (Linux `PATH_MAX`).
pub const MAX_PATH: usize = 4096;

/// Checks that `value` is a usable absolute path for request field `field`
/// and returns it normalised (no `.` components, no repeated or trailing `/`).
pub fn absolute(field: &str, value: &str) -> Result<String, Status> {
    if value.is_empty() {
        return Err(Status::invalid(format!("{field} is required")));
    }
    if value.len() > MAX_PATH {
        return Err(Status::invalid(format!(
            "{field} is {} bytes long; the limit is {MAX_PATH}",
            value.len()
        )));
    }
    if value.contains('\0') {
        return Err(Status::invalid(format!("{field} contains a NUL byte")));
    }
    if !value.starts_with('/') {
        return Err(Status::invalid(format!(
            "{field} {value:?} is not an absolute path"
        )));
    }
    let mut parts = Vec::new();
    for part in value.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                return Err(Status::invalid(format!(
                    "{field} {value:?} contains a \"..\" component"
                )));
            }
            p => parts.push(p),
        }
    }
    Ok(format!("/{}", parts.join("/")))
}

/// True when normalised `path` is `root` or lies below it (component-wise:
/// `/a/bc` is not under `/a/b`).
pub fn is_under(path: &str, root: &str) -> bool {
    let root = root.trim_end_matches('/');
    if root.is_empty() {
        return path.starts_with('/');
    }
    path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// Checks an absolute path and that it lies strictly below one of `roots`.
pub fn confined(field: &str, value: &str, roots: &[String]) -> Result<String, Status> {
    let path = absolute(field, value)?;
    if roots.iter().any(|root| {
        is_under(&path, root) && path.trim_end_matches('/') != root.trim_end_matches('/')
    }) {
        Ok(path)
    } else {
        Err(Status::invalid(format!(
            "{field} {value:?} is outside the directories this driver may use ({})",
            roots.join(", ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_normalises_and_rejects_traversal() {
        assert_eq!(absolute("p", "/a//b/./c/").unwrap(), "/a/b/c");
        assert_eq!(
            absolute("p", "/a/../b").unwrap_err().code,
            crate::Code::InvalidArgument
        );
        assert!(absolute("p", "a/b").is_err());
        assert!(
            absolute("p", "")
                .unwrap_err()
                .message
                .contains("p is required")
        );
        assert!(absolute("p", "/a\0b").is_err());
        assert!(absolute("p", &format!("/{}", "x".repeat(MAX_PATH))).is_err());
    }

    #[test]
    fn under_is_component_wise() {
        assert!(is_under("/var/lib/kubelet/pods", "/var/lib/kubelet"));
        assert!(is_under("/var/lib/kubelet", "/var/lib/kubelet/"));
        assert!(!is_under("/var/lib/kubeletx", "/var/lib/kubelet"));
        assert!(!is_under("/var/lib", "/var/lib/kubelet"));
    }

    #[test]
    fn confined_refuses_the_root_itself_and_outside_paths() {
        let roots = vec!["/var/lib/kubelet".to_string()];
        assert!(confined("t", "/var/lib/kubelet/pods/x/mount", &roots).is_ok());
        assert!(confined("t", "/var/lib/kubelet", &roots).is_err());
        let e = confined("t", "/etc/passwd", &roots).unwrap_err();
        assert!(e.message.contains("outside"), "{e}");
    }
}
