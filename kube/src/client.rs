//! One API client per role, each naming itself: every request carries the
//! User-Agent `volplane/<version> (<role>)`, so an operator finds
//! volplane's requests in the audit log and can write API Priority and
//! Fairness rules per role, as for client-go's components.

use http::HeaderValue;

/// The User-Agent of `role`'s requests.
pub fn user_agent(role: &str) -> String {
    format!("volplane/{} ({role})", env!("CARGO_PKG_VERSION"))
}

/// A client from `config` whose requests say they come from `role`.
pub fn client_for(config: &kube::Config, role: &str) -> Result<kube::Client, kube::Error> {
    let mut config = config.clone();
    let agent = HeaderValue::from_str(&user_agent(role))
        .unwrap_or_else(|_| HeaderValue::from_static("volplane"));
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, agent));
    kube::Client::try_from(config)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_user_agent_names_the_version_and_the_role() {
        assert_eq!(
            super::user_agent("provisioner"),
            format!("volplane/{} (provisioner)", env!("CARGO_PKG_VERSION"))
        );
    }
}

#[cfg(test)]
mod wire {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Every request of a role's client says so on the wire.
    #[tokio::test]
    async fn a_roles_requests_carry_its_user_agent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let config = kube::Config::new(url.parse().unwrap());
        let client = super::client_for(&config, "provisioner").unwrap();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let body = r#"{"major":"1","minor":"36","gitVersion":"v1.36.2"}"#;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(answer.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head).to_lowercase()
        });
        let _ = client.apiserver_version().await;
        let head = server.await.unwrap();
        let expected = format!("user-agent: {}", super::user_agent("provisioner")).to_lowercase();
        assert!(head.contains(&expected), "{head}");
    }
}
