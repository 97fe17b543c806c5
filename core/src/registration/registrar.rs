//! node-driver-registrar (E5.3): learn the driver's name, open
//! `<driver>-reg.sock` in the kubelet's registry directory, answer GetInfo,
//! and exit with the reason if the kubelet refuses the registration.

use std::collections::VecDeque;

use super::{CSI_PLUGIN, PluginInfo, registration_socket};
use crate::control::Ops;
use crate::driver::Response;
use crate::machine::{Machine, TimerTable};
use crate::{OpId, Status, Tick};

/// How the registrar runs.
#[derive(Debug, Clone, Hash)]
pub struct RegistrarConfig {
    /// The kubelet's plugin registry directory (`/var/lib/kubelet/plugins_registry`).
    pub registry_dir: String,
    /// `--kubelet-registration-path`: the CSI socket as the kubelet sees it.
    pub kubelet_registration_path: String,
    /// The registration API versions offered.
    pub supported_versions: Vec<String>,
    /// Delay before asking the driver again when it does not answer.
    pub retry: Tick,
}

impl RegistrarConfig {
    /// A registrar publishing in `registry_dir` a socket for the driver at `kubelet_registration_path`.
    pub fn new(registry_dir: &str, kubelet_registration_path: &str) -> RegistrarConfig {
        RegistrarConfig {
            registry_dir: registry_dir.into(),
            kubelet_registration_path: kubelet_registration_path.into(),
            supported_versions: vec!["1.0.0".into()],
            retry: 1_000,
        }
    }
}

/// What the registrar is told.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum RegistrarInput {
    /// The process started.
    Start,
    /// The driver's GetPluginInfo answer, for [`RegistrarEffect::GetPluginInfo`].
    PluginInfo {
        /// The call polled with this id.
        op: OpId,
        /// The driver's answer.
        result: Result<Response, Status>,
    },
    /// The registration socket is listening (or could not be opened), for
    /// [`RegistrarEffect::Listen`].
    Listening {
        /// The listen polled with this id.
        op: OpId,
        /// Listening, or why not.
        result: Result<(), crate::machine::EffectFailed>,
    },
    /// The kubelet called GetInfo.
    GetInfo {
        /// Names the call in the answer.
        rpc: u64,
    },
    /// The kubelet called NotifyRegistrationStatus.
    Status {
        /// Names the call in the answer.
        rpc: u64,
        /// The kubelet registered the driver.
        registered: bool,
        /// Why not, when it did not.
        error: String,
    },
    /// SIGTERM.
    Terminate,
}

/// What the registrar asks its adapter to do.
#[derive(Debug, Clone, PartialEq, Hash)]
pub enum RegistrarEffect {
    /// Call GetPluginInfo on the driver's socket; answer with
    /// [`RegistrarInput::PluginInfo`].
    GetPluginInfo {
        /// Named again in the answer.
        op: OpId,
    },
    /// Listen on `socket` for the kubelet; answer with
    /// [`RegistrarInput::Listening`].
    Listen {
        /// Named again in the answer.
        op: OpId,
        /// The registration socket's path.
        socket: String,
    },
    /// Answer the kubelet's GetInfo `rpc`.
    Info {
        /// The call answered.
        rpc: u64,
        /// The answer.
        info: PluginInfo,
    },
    /// Answer the kubelet's NotifyRegistrationStatus `rpc`.
    Ack {
        /// The call answered.
        rpc: u64,
    },
    /// Remove the registration socket (the kubelet then unregisters the driver).
    RemoveSocket {
        /// Its path.
        socket: String,
    },
    /// Exit the process with `code`, logging `reason`.
    Exit {
        /// The exit code.
        code: i32,
        /// Why, for the log.
        reason: String,
    },
}

/// Where the registrar is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not started.
    Idle,
    /// Waiting for the driver's name.
    AskingDriver,
    /// Listening for the kubelet on the driver's registration socket.
    Listening {
        /// The driver's name.
        driver: String,
    },
    /// The kubelet registered the driver.
    Registered {
        /// The driver's name.
        driver: String,
    },
    /// Exit was asked.
    Exited,
}

/// The registrar's one deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Timer {
    /// Ask the driver for its name again.
    AskDriver,
}

/// The registrar. See the module documentation.
#[derive(Debug, Clone, Hash)]
pub struct Registrar {
    config: RegistrarConfig,
    phase: Phase,
    timers: TimerTable<Timer>,
    queue: VecDeque<RegistrarEffect>,
    ops: Ops,
    /// The GetPluginInfo or Listen whose answer is awaited.
    waiting: Option<OpId>,
    now: Tick,
}

impl Registrar {
    /// A registrar that has not started.
    pub fn new(config: RegistrarConfig) -> Registrar {
        Registrar {
            config,
            phase: Phase::Idle,
            timers: TimerTable::default(),
            queue: VecDeque::new(),
            ops: Ops::default(),
            waiting: None,
            now: 0,
        }
    }

    /// Where the registrar is.
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
        self.waiting = None;
        self.timers.stop(&Timer::AskDriver);
        self.queue.push_back(RegistrarEffect::Exit { code, reason });
    }

    fn ask_driver(&mut self) {
        let op = self.ops.issue();
        self.waiting = Some(op);
        self.queue.push_back(RegistrarEffect::GetPluginInfo { op });
    }

    /// True when `op` is the completion awaited (a stale or repeated one is not).
    fn awaited(&mut self, op: OpId) -> bool {
        if self.waiting == Some(op) {
            self.waiting = None;
            true
        } else {
            false
        }
    }

    fn plugin_info(&mut self, result: Result<Response, Status>) {
        match result {
            Ok(Response::PluginInfo { name, .. }) if !name.is_empty() => {
                // The name becomes a file name in the kubelet's registry: a
                // name that is not a CSI driver name never reaches a path.
                if let Err(why) = super::check_driver_name(&name) {
                    return self.exit(1, why.to_string());
                }
                let socket = self.socket(&name);
                self.phase = Phase::Listening { driver: name };
                let op = self.ops.issue();
                self.waiting = Some(op);
                self.queue.push_back(RegistrarEffect::Listen { op, socket });
            }
            // The driver is not up yet (or answered nonsense): ask again.
            _ => self
                .timers
                .set(Timer::AskDriver, self.now + self.config.retry),
        }
    }

    fn get_info(&mut self, rpc: u64) {
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

    fn status(&mut self, rpc: u64, registered: bool, error: String) {
        self.queue.push_back(RegistrarEffect::Ack { rpc });
        if !registered {
            self.exit(1, format!("plugin registration failed with err: {error}"));
        } else if let Phase::Listening { driver } = &self.phase {
            self.phase = Phase::Registered {
                driver: driver.clone(),
            };
        }
    }
}

impl Machine for Registrar {
    type Input = RegistrarInput;
    type Effect = RegistrarEffect;

    fn handle(&mut self, now: Tick, input: RegistrarInput) {
        self.now = self.now.max(now);
        if self.phase == Phase::Exited {
            return;
        }
        match input {
            RegistrarInput::Start if self.phase == Phase::Idle => {
                self.phase = Phase::AskingDriver;
                self.ask_driver();
            }
            RegistrarInput::Start => {}
            RegistrarInput::PluginInfo { op, result } => {
                if self.awaited(op) && self.phase == Phase::AskingDriver {
                    self.plugin_info(result)
                }
            }
            RegistrarInput::Listening { op, result } => {
                if self.awaited(op)
                    && let Err(e) = result
                {
                    self.exit(1, format!("cannot listen for the kubelet: {e}"))
                }
            }
            RegistrarInput::GetInfo { rpc } => self.get_info(rpc),
            RegistrarInput::Status {
                rpc,
                registered,
                error,
            } => self.status(rpc, registered, error),
            RegistrarInput::Terminate => self.exit(0, "terminated".into()),
        }
    }

    fn poll(&mut self) -> Option<RegistrarEffect> {
        self.queue.pop_front()
    }

    fn poll_timeout(&self) -> Option<Tick> {
        self.timers.next()
    }

    /// An answer is awaited only while asking or listening; an exited
    /// registrar holds no deadline.
    fn check_invariants(&self) -> Result<(), crate::machine::Broken> {
        let asking = matches!(self.phase, Phase::AskingDriver | Phase::Listening { .. });
        if self.waiting.is_some() && !asking {
            return Err(format!("registrar: awaits an answer in phase {:?}", self.phase).into());
        }
        if self.phase == Phase::Exited && !self.timers.is_empty() {
            return Err("registrar: exited with a deadline armed".into());
        }
        Ok(())
    }

    fn handle_timeout(&mut self, now: Tick) {
        self.now = self.now.max(now);
        for timer in self.timers.expire(now) {
            match timer {
                Timer::AskDriver if self.phase == Phase::AskingDriver => self.ask_driver(),
                Timer::AskDriver => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(op: OpId, name: &str) -> RegistrarInput {
        RegistrarInput::PluginInfo {
            op,
            result: Ok(Response::PluginInfo {
                name: name.into(),
                vendor_version: "1".into(),
                manifest: Default::default(),
            }),
        }
    }

    #[test]
    fn a_driver_name_that_is_not_one_never_becomes_a_path() {
        for hostile in [
            "../../etc/cron.d/x",
            "a/b",
            "..",
            "-x",
            "x.",
            &"a".repeat(64),
        ] {
            let mut r = Registrar::new(RegistrarConfig::new("/reg", "/csi.sock"));
            r.handle(0, RegistrarInput::Start);
            assert_eq!(
                r.poll(),
                Some(RegistrarEffect::GetPluginInfo { op: OpId(1) })
            );
            r.handle(1, info(OpId(1), hostile));
            let Some(RegistrarEffect::Exit { code: 1, reason }) = r.poll() else {
                panic!("{hostile:?} must not be listened on")
            };
            assert!(reason.contains("not a CSI driver name"), "{reason}");
            assert_eq!(r.poll(), None, "no socket, no removal: nothing touched");
        }
    }

    #[test]
    fn e5_3_registers_as_a_csi_plugin_and_exits_when_refused() {
        let mut r = Registrar::new(RegistrarConfig::new(
            "/var/lib/kubelet/plugins_registry",
            "/var/lib/kubelet/plugins/d/csi.sock",
        ));
        r.handle(0, RegistrarInput::Start);
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::GetPluginInfo { op: OpId(1) })
        );
        r.handle(
            1,
            RegistrarInput::PluginInfo {
                op: OpId(1),
                result: Err(Status::new(crate::Code::Unavailable, "connection refused")),
            },
        );
        assert_eq!(r.poll(), None);
        assert_eq!(r.poll_timeout(), Some(1001));
        r.handle_timeout(1001);
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::GetPluginInfo { op: OpId(2) })
        );
        r.handle(1002, info(OpId(1), "stale.csi.io"));
        assert_eq!(r.poll(), None, "a stale answer is ignored");
        r.handle(1002, info(OpId(2), "volplane.csi.io"));
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::Listen {
                op: OpId(3),
                socket: "/var/lib/kubelet/plugins_registry/volplane.csi.io-reg.sock".into()
            })
        );
        r.handle(
            1002,
            RegistrarInput::Listening {
                op: OpId(3),
                result: Ok(()),
            },
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

    /// Starts a registrar and answers its first GetPluginInfo with `answer`.
    fn asked(answer: Result<Response, Status>) -> Registrar {
        let mut r = Registrar::new(RegistrarConfig::new("/reg", "/csi.sock"));
        r.handle(0, RegistrarInput::Start);
        assert_eq!(
            r.poll(),
            Some(RegistrarEffect::GetPluginInfo { op: OpId(1) })
        );
        r.handle(
            1,
            RegistrarInput::PluginInfo {
                op: OpId(1),
                result: answer,
            },
        );
        r
    }

    #[test]
    fn e5_3_a_driver_that_names_no_name_yet_is_asked_again() {
        let mut r = asked(Ok(Response::PluginInfo {
            name: String::new(),
            vendor_version: "1".into(),
            manifest: Default::default(),
        }));
        assert_eq!(r.poll(), None, "no exit, no socket");
        assert_eq!(r.phase(), &Phase::AskingDriver);
        assert_eq!(r.poll_timeout(), Some(1001));
        r.check_invariants().unwrap();
    }

    #[test]
    fn a_second_start_changes_nothing() {
        let mut r = asked(Ok(Response::PluginInfo {
            name: "volplane.csi.io".into(),
            vendor_version: "1".into(),
            manifest: Default::default(),
        }));
        assert!(matches!(r.poll(), Some(RegistrarEffect::Listen { .. })));
        r.handle(2, RegistrarInput::Start);
        assert_eq!(r.poll(), None);
        assert!(matches!(r.phase(), Phase::Listening { .. }));
    }

    #[test]
    fn a_retry_timer_left_over_from_asking_asks_nothing_once_listening() {
        let mut r = asked(Err(Status::new(crate::Code::Unavailable, "down")));
        r.phase = Phase::Listening {
            driver: "volplane.csi.io".into(),
        };
        r.handle_timeout(1001);
        assert_eq!(r.poll(), None);
    }

    #[test]
    fn the_invariants_name_an_answer_awaited_out_of_phase_and_a_deadline_after_exit() {
        let mut r = asked(Err(Status::new(crate::Code::Unavailable, "down")));
        r.check_invariants().unwrap();
        r.phase = Phase::Registered {
            driver: "volplane.csi.io".into(),
        };
        r.waiting = Some(OpId(9));
        let e = r.check_invariants().unwrap_err();
        assert!(e.0.contains("awaits an answer in phase Registered"), "{e}");
        r.phase = Phase::Listening {
            driver: "volplane.csi.io".into(),
        };
        r.check_invariants().unwrap();
        r.waiting = None;
        r.phase = Phase::Exited;
        let e = r.check_invariants().unwrap_err();
        assert!(e.0.contains("exited with a deadline armed"), "{e}");
    }
}
