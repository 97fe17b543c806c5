use super::*;

/// A driver that can do everything: the simulated one.
fn everything() -> DriverFacts {
    crate::sim::driver_facts()
}

fn all_on() -> Flags {
    Flags {
        switches: Switches::all(),
        capacity: Some(CapacityTracking {
            namespace: "kube-system".into(),
            owner: None,
            poll_interval: Some(60_000),
            immediate_binding: false,
        }),
        ..Flags::default()
    }
}

#[test]
fn every_role_is_found_by_its_name() {
    for r in Role::ALL {
        assert_eq!(Role::named(r.name()), Some(r));
    }
    assert_eq!(Role::named("kubelet"), None);
}

#[test]
fn every_switch_on_for_a_driver_that_can_do_everything_makes_every_role_in_order() {
    let made = make(&everything(), &all_on());
    assert_eq!(made.off, Vec::<RoleOff>::new());
    let roles: Vec<Role> = made.machines.iter().map(RoleMachine::role).collect();
    assert_eq!(roles, Role::ALL.to_vec());
    for m in &made.machines {
        assert!(
            Kind::ALL.into_iter().any(|k| m.watches(k)),
            "{} watches nothing",
            m.role().name()
        );
        m.check_invariants()
            .expect("a fresh machine keeps its invariants");
    }
}

#[test]
fn the_default_switches_are_the_sidecars() {
    let made = make(&everything(), &Flags::default());
    let roles: Vec<Role> = made.machines.iter().map(RoleMachine::role).collect();
    assert_eq!(roles, [Role::Provisioner, Role::Attacher, Role::Resizer]);
}

#[test]
fn a_role_the_driver_cannot_serve_is_off_and_says_why() {
    let facts = DriverFacts {
        controller: vec![Cap::CreateDeleteVolume],
        plugin: vec![],
        ..everything()
    };
    let made = make(&facts, &all_on());
    let roles: Vec<Role> = made.machines.iter().map(RoleMachine::role).collect();
    assert_eq!(
        roles,
        [
            Role::Provisioner,
            Role::Attacher,
            Role::Binder,
            Role::SnapshotController,
            Role::PvcProtection,
            Role::PvProtection
        ]
    );
    assert_eq!(
        made.off.iter().map(RoleOff::to_string).collect::<Vec<_>>(),
        [
            "snapshotter: group snapshots: the driver has no GROUP_CONTROLLER_SERVICE",
            "resizer: the driver has neither EXPAND_VOLUME nor MODIFY_VOLUME",
            "capacity: the driver has no GET_CAPACITY",
            "snapshotter: the driver has no CREATE_DELETE_SNAPSHOT",
        ]
    );
}

#[test]
fn the_provisioner_watches_snapshots_only_when_it_restores_from_them() {
    let only = Flags {
        switches: Switches {
            provisioner: true,
            ..Switches::none()
        },
        ..Flags::default()
    };
    let watches = |flags: &Flags| {
        let made = make(&everything(), flags);
        let [m] = &made.machines[..] else {
            panic!("{:?}", made.machines)
        };
        m.watches(Kind::VolumeSnapshot)
    };
    assert!(!watches(&only));
    assert!(watches(&Flags {
        restore_snapshots: true,
        ..only.clone()
    }));
}
