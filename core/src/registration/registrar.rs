//! node-driver-registrar (E5.3): learn the driver's name, open
//! `<driver>-reg.sock` in the kubelet's registry directory, answer GetInfo,
//! and exit with the reason if the kubelet refuses the registration.

use std::collections::VecDeque;

use super::{CSI_PLUGIN, PluginInfo, registration_socket};
use crate::driver::Response;
use crate::{Status, Tick};

/// How the registrar runs.
#[derive(Debug, Clone)]
pub struct RegistrarConfig {
    /// The kubelet's plugin registry directory (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: String,
    /// `--kubelet-registration-path`: the CSI socket as the kubelet sees it.
    pub kubelet_registration_path: String,
    pub supported_versions: Vec<String>,
    /// Delay before asking the driver again when it does not answer.
    pub retry: Tick,
}

impl RegistrarConfig {
    pub fn new(registry_dir: &str, kubelet_registration_path: &str) -> RegistrarConfig {
        RegistrarConfig {
            registry_dir: registry_dir.into(),
            kubelet_registration_path: kubelet_registration_path.into(),
            supported_versions: vec!["1.0.0".into()],
            retry: 1_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum RegistrarInput {
    Start,
    /// The driver's GetPluginInfo answer.
    PluginInfo(Result<Response, Status>),
    /// The registration socket is listening (or could not be opened).
    Listening(Result<(), String>),
    /// The kubelet called GetInfo.
    GetInfo {
        rpc: u64,
    },
    /// The kubelet called NotifyRegistrationStatus.
    Status {
        rpc: u64,
        registered: bool,
        error: String,
    },
    /// SIGTERM.
    Terminate,
}

#[derive(Debug, Clone, PartialEq)]
pub enum RegistrarEffect {
    /// Call GetPluginInfo on the driver's socket.
    GetPluginInfo,
    /// Listen on this socket path for the kubelet.
    Listen {
        socket: String,
    },
    Info {
        rpc: u64,
        info: PluginInfo,
    },
    Ack {
        rpc: u64,
    },
    RemoveSocket {
        socket: String,
    },
    /// Exit the process with this code, logging the reason.
    Exit {
        code: i32,
        reason: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    Idle,
    AskingDriver,
    Listening { driver: String },
    Registered { driver: String },
    Exited,
}

/// The registrar. See the module documentation.
#[derive(Debug, Clone)]
pub struct Registrar {
    config: RegistrarConfig,
    phase: Phase,
    retry_at: Option<Tick>,
    queue: VecDeque<RegistrarEffect>,
    now: Tick,
}

impl Registrar {
    pub fn new(config: RegistrarConfig) -> Registrar {
        Registrar {
            config,
            phase: Phase::Idle,
            retry_at: None,
            queue: VecDeque::new(),
            now: 0,
        }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    fn socket(&self, driver: &str) -> String {
        format!(
            "{}/{}",
            self.config.registry_dir.trim_end_matches('/'),
            registration_socket(driver)
        )
    }

    fn exit(&mut self, code: i32, reason: String) {
        if let Phase::Listening { driver } | Phase::Registered { driver } = &self.phase {
            let socket = self.socket(driver);
            self.queue
                .push_back(RegistrarEffect::RemoveSocket { socket });
        }
        self.phase = Phase::Exited;
        self.queue.push_back(RegistrarEffect::Exit { code, reason });
    }

    pub fn handle(&mut self, now: Tick, input: RegistrarInput) {
        self.now = self.now.max(now);
        match input {
            RegistrarInput::Start => {
                self.phase = Phase::AskingDriver;
                self.queue.push_back(RegistrarEffect::GetPluginInfo);
            }
            RegistrarInput::PluginInfo(Ok(Response::PluginInfo { name, .. }))
                if !name.is_empty() =>
            {
                let socket = self.socket(&name);
                self.phase = Phase::Listening { driver: name };
                self.queue.push_back(RegistrarEffect::Listen { socket });
            }
            RegistrarInput::PluginInfo(_) => {
                // The driver is not up yet (or answered nonsense): ask again.
                self.retry_at = Some(self.now + self.config.retry);
            }
            RegistrarInput::Listening(Ok(())) => {}
            RegistrarInput::Listening(Err(e)) => {
                self.exit(1, format!("cannot listen for the kubelet: {e}"))
            }
            RegistrarInput::GetInfo { rpc } => {
                if let Phase::Listening { driver } | Phase::Registered { driver } = &self.phase {
                    let info = PluginInfo {
                        type_: CSI_PLUGIN.into(),
                        name: driver.clone(),
                        endpoint: self.config.kubelet_registration_path.clone(),
                        supported_versions: self.config.supported_versions.clone(),
                    };
                    self.queue.push_back(RegistrarEffect::Info { rpc, info });
                }
            }
            RegistrarInput::Status {
                rpc,
                registered,
                error,
            } => {
                self.queue.push_back(RegistrarEffect::Ack { rpc });
                if registered {
                    if let Phase::Listening { driver } = &self.phase {
                        self.phase = Phase::Registered {
                            driver: driver.clone(),
                        };
                    }
                } else {
                    self.exit(1, format!("plugin registration failed with err: {error}"));
                }
            }
            RegistrarInput::Terminate => self.exit(0, "terminated".into()),
        }
    }

    pub fn poll(&mut self) -> Option<RegistrarEffect> {
        self.queue.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<Tick> {
        self.retry_at
    }

    pub fn handle_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        if self.retry_at.is_some_and(|t| t <= now) && self.phase == Phase::AskingDriver {
            self.retry_at = None;
            self.queue.push_back(RegistrarEffect::GetPluginInfo);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> RegistrarInput {
        RegistrarInput::PluginInfo(Ok(Response::PluginInfo {
            name: name.into(),
            vendor_version: "1".into(),
            manifest: Default::default(),
        }))
    }

    #[test]
    fn e5_3_registers_as_a_csi_plugin_and_exits_when_refused() {
        let mut r = Registrar::new(RegistrarConfig::new(
            "/var/lib/kubelet/plugins_registry",
            "/var/lib/kubelet/plugins/d/csi.sock",
        ));
        r.handle(0, RegistrarInput::Start);
        assert_eq!(r.poll(), Some(RegistrarEffect::GetPluginInfo));
        r.handle(
            1,
            RegistrarInput::PluginInfo(Err(Status::new(
                crate::Code::Unavailable,
                "connection refused",
            ))),
        );
        assert_eq!(r.poll(), None);
        assert_eq!(r.poll_timeout(), Some(1001));
        r.handle_timeout(1001);
        assert_eq!(r.poll(), Some(RegistrarEffect::GetPluginInfo));
        r.handle(1002, info("volplane.csi.io"));
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::Listen {
                socket: "/var/lib/kubelet/plugins_registry/volplane.csi.io-reg.sock".into()
            })
        );
        r.handle(1003, RegistrarInput::GetInfo { rpc: 7 });
        let Some(RegistrarEffect::Info { rpc: 7, info }) = r.poll() else {
            panic!()
        };
        assert_eq!(info.type_, "CSIPlugin");
        assert_eq!(info.endpoint, "/var/lib/kubelet/plugins/d/csi.sock");
        assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
        r.handle(
            1004,
            RegistrarInput::Status {
                rpc: 8,
                registered: false,
                error: "version 1.0.0 too old".into(),
            },
        );
        assert_eq!(r.poll(), Some(RegistrarEffect::Ack { rpc: 8 }));
        assert!(matches!(
            r.poll(),
            Some(RegistrarEffect::RemoveSocket { .. })
        ));
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::Exit {
                code: 1,
                reason: "plugin registration failed with err: version 1.0.0 too old".into()
            })
        );
        assert_eq!(r.phase(), &Phase::Exited);
    }
}
