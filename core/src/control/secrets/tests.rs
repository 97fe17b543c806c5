//! B2.9, case by case as external-provisioner resolves them.

use super::*;

fn class(pairs: &[(&str, &str)]) -> crate::model::Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn claim() -> PersistentVolumeClaim {
    let mut c = PersistentVolumeClaim::new("team-a", "data");
    c.metadata
        .annotations
        .insert("example.com/secret".into(), "per-claim".into());
    c.metadata
        .annotations
        .insert("example.com/bad".into(), "Not_A_Name".into());
    c
}

const PV: &str = "pvc-0d2c";

/// A resolved (name, namespace), none, or the message.
type Resolved = Result<Option<(String, String)>, String>;

fn resolve(p: &SecretParams, pairs: &[(&str, &str)]) -> Resolved {
    let c = claim();
    let tokens = Tokens {
        pv_name: PV,
        claim: Some(&c),
    };
    secret_ref(p, &class(pairs), tokens)
        .map(|r| r.map(|r| (r.name, r.namespace)))
        .map_err(|e| e.to_string())
}

fn ok(name: &str, namespace: &str) -> Resolved {
    Ok(Some((name.into(), namespace.into())))
}

const P_NAME: &str = "csi.storage.k8s.io/provisioner-secret-name";
const P_NS: &str = "csi.storage.k8s.io/provisioner-secret-namespace";
const D_NAME: &str = "csi.storage.k8s.io/secret-name";
const D_NS: &str = "csi.storage.k8s.io/secret-namespace";

#[test]
fn b2_9_a_pair_names_the_secret_and_the_default_pair_is_the_fallback() {
    assert_eq!(resolve(&PROVISIONER, &[]), Ok(None));
    assert_eq!(
        resolve(&PROVISIONER, &[(P_NAME, "creds"), (P_NS, "storage")]),
        ok("creds", "storage")
    );
    // The deprecated keys still count.
    assert_eq!(
        resolve(
            &PROVISIONER,
            &[
                ("csiProvisionerSecretName", "old"),
                ("csiProvisionerSecretNamespace", "storage")
            ]
        ),
        ok("old", "storage")
    );
    // The default pair, unless the operation has its own.
    let both = [(D_NAME, "shared"), (D_NS, "kube-system")];
    assert_eq!(resolve(&NODE_STAGE, &both), ok("shared", "kube-system"));
    let own = [
        (D_NAME, "shared"),
        (D_NS, "kube-system"),
        ("csi.storage.k8s.io/node-stage-secret-name", "stage"),
        ("csi.storage.k8s.io/node-stage-secret-namespace", "storage"),
    ];
    assert_eq!(resolve(&NODE_STAGE, &own), ok("stage", "storage"));
    assert_eq!(resolve(&NODE_EXPAND, &own), ok("shared", "kube-system"));
}

#[test]
fn b2_9_wrongly_given_pairs_are_refused_with_upstream_messages() {
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[
                (P_NAME, "a"),
                ("csiProvisionerSecretName", "b"),
                (P_NS, "storage"),
            ],
            "failed to get name and namespace template from params: Provisioner secrets specified in parameters with both \"csi\" and \"csi.storage.k8s.io/\" keys",
        ),
        (
            &[(P_NAME, "a")],
            "failed to get name and namespace template from params: either name and namespace for Provisioner secrets specified, Both must be specified",
        ),
        (
            &[(P_NAME, ""), (P_NS, "storage")],
            "failed to get name and namespace template from params: Provisioner secrets specified in parameters but value of either namespace or name is empty",
        ),
        (
            &[(D_NS, "storage")],
            "failed to get default name and namespace template from params: either name and namespace for Default secrets specified, Both must be specified",
        ),
    ];
    for (pairs, message) in cases {
        assert_eq!(
            resolve(&PROVISIONER, pairs),
            Err(message.to_string()),
            "{pairs:?}"
        );
    }
}

#[test]
fn b2_9_templates_resolve_against_the_volume_and_the_claim() {
    let cases: [(&str, &str, Resolved); 7] = [
        ("${pvc.name}-creds", "${pvc.namespace}", ok("data-creds", "team-a")),
        ("${pv.name}", "${pv.name}", ok(PV, PV)),
        ("${pvc.annotations['example.com/secret']}", "storage", ok("per-claim", "storage")),
        // The claim's user names neither the namespace nor, through it,
        // someone else's secrets.
        (
            "creds",
            "${pvc.name}",
            Err("error resolving value \"${pvc.name}\": invalid tokens: [\"pvc.name\"]".into()),
        ),
        (
            "${pvc.annotations['example.com/missing']}-${nope}",
            "storage",
            Err("error resolving value \"${pvc.annotations['example.com/missing']}-${nope}\": invalid tokens: [\"nope\" \"pvc.annotations['example.com/missing']\"]".into()),
        ),
        (
            "${pvc.annotations['example.com/bad']}",
            "storage",
            Err("\"${pvc.annotations['example.com/bad']}\" resolved to \"Not_A_Name\" which is not a valid secret name".into()),
        ),
        (
            "creds",
            "Storage",
            Err("\"Storage\" is not a valid namespace name".into()),
        ),
    ];
    for (name, namespace, want) in cases {
        assert_eq!(
            resolve(&PROVISIONER, &[(P_NAME, name), (P_NS, namespace)]),
            want,
            "{name} in {namespace}"
        );
    }
}

#[test]
fn b2_9_without_a_claim_only_the_volume_name_resolves() {
    let pairs = class(&[(P_NAME, "${pvc.name}"), (P_NS, "storage")]);
    let tokens = Tokens {
        pv_name: PV,
        claim: None,
    };
    assert_eq!(
        secret_ref(&PROVISIONER, &pairs, tokens).map_err(|e| e.to_string()),
        Err("error resolving value \"${pvc.name}\": invalid tokens: [\"pvc.name\"]".into())
    );
    let pairs = class(&[(P_NAME, "${pv.name}"), (P_NS, "storage")]);
    assert_eq!(
        secret_ref(&PROVISIONER, &pairs, tokens)
            .unwrap()
            .unwrap()
            .name,
        PV
    );
}

#[test]
fn expansion_follows_go_os_expand() {
    let lookup = |t: &str| match t {
        "a" => Some("A".to_string()),
        "a_b" => Some("AB".to_string()),
        "1" => Some("one".to_string()),
        _ => None,
    };
    for (template, want) in [
        ("plain", "plain"),
        ("$a", "A"),
        ("${a}-$a_b.", "A-AB."),
        ("x$", "x$"),
        ("$ x", "$ x"),
        ("$1${1}", "oneone"),
        // Bad syntax is eaten, as Go does.
        ("<${}>", "<>"),
        ("<${a", "<a"),
    ] {
        assert_eq!(expand(template, lookup), Ok(want.to_string()), "{template}");
    }
    assert_eq!(
        expand("$b ${c} $b", lookup),
        Err(vec!["b".to_string(), "c".to_string()])
    );
}

#[test]
fn names_are_checked_as_the_api_server_checks_them() {
    for good in ["a", "kube-system", "0ab", &"x".repeat(63)] {
        assert!(is_dns1123_label(good), "{good}");
    }
    for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
        assert!(!is_dns1123_label(bad), "{bad}");
    }
    for good in ["a.b", "creds-1.example.com", &"x".repeat(63)] {
        assert!(is_dns1123_subdomain(good), "{good}");
    }
    for bad in [
        "",
        "a..b",
        ".a",
        "a.",
        "A.b",
        &format!("{}.{}", "x".repeat(63), "y".repeat(190)),
    ] {
        assert!(!is_dns1123_subdomain(bad), "{bad}");
    }
}

#[test]
fn snapshot_templates_resolve_as_the_snapshotters_do_and_have_no_default() {
    let params: crate::model::Labels = [
        (
            "csi.storage.k8s.io/snapshotter-secret-name",
            "${volumesnapshot.name}-${volumesnapshotcontent.name}",
        ),
        (
            "csi.storage.k8s.io/snapshotter-secret-namespace",
            "${volumesnapshot.namespace}",
        ),
        ("csi.storage.k8s.io/secret-name", "ignored"),
        ("csi.storage.k8s.io/secret-namespace", "ignored"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let tokens = SnapshotTokens {
        kind: "volumesnapshot",
        content: "snapcontent-1",
        snapshot: Some(("apps", "daily")),
    };
    let r = secret_ref(&SNAPSHOTTER, &params, tokens).unwrap().unwrap();
    assert_eq!(
        (r.name.as_str(), r.namespace.as_str()),
        ("daily-snapcontent-1", "apps")
    );
    // The user-chosen snapshot name may not pick the namespace.
    let mut bad = params.clone();
    bad.insert(
        "csi.storage.k8s.io/snapshotter-secret-namespace".into(),
        "${volumesnapshot.name}".into(),
    );
    assert_eq!(
        secret_ref(&SNAPSHOTTER, &bad, tokens).map_err(|e| e.to_string()),
        Err("error resolving value \"${volumesnapshot.name}\": invalid tokens: [\"volumesnapshot.name\"]".into())
    );
    // No pair of its own: none, whatever the default pair says.
    assert_eq!(secret_ref(&SNAPSHOTTER_LIST, &params, tokens), Ok(None));
    // A group's tokens name the group.
    let group = SnapshotTokens {
        kind: "volumegroupsnapshot",
        content: "groupsnapcontent-1",
        snapshot: Some(("apps", "nightly")),
    };
    let gp: crate::model::Labels = [
        (
            "csi.storage.k8s.io/group-snapshotter-secret-name",
            "${volumegroupsnapshot.name}",
        ),
        (
            "csi.storage.k8s.io/group-snapshotter-secret-namespace",
            "${volumegroupsnapshot.namespace}",
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = secret_ref(&GROUP_SNAPSHOTTER, &gp, group).unwrap().unwrap();
    assert_eq!((r.name.as_str(), r.namespace.as_str()), ("nightly", "apps"));
}
