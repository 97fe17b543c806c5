//! JSON merge patches (RFC 7386) between two versions of an object, as the
//! machines see it: a write sends only what the machine changed, so every
//! field the model does not know — and every field it knows but left alone —
//! stays as the API server has it.

use serde_json::{Map, Value};

/// The merge patch that turns `old` into `new`: changed and added members
/// with their new values, removed members as `null`, objects recursively,
/// arrays whole. `None` when nothing changed.
///
/// A `null` inside `new` cannot be said in a merge patch (it means
/// "remove"); the model never serialises one.
pub fn merge_patch(old: &Value, new: &Value) -> Option<Value> {
    if old == new {
        return None;
    }
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return Some(new.clone());
    };
    let mut patch = Map::new();
    for (key, value) in new {
        match old.get(key) {
            Some(before) => {
                if let Some(p) = merge_patch(before, value) {
                    patch.insert(key.clone(), p);
                }
            }
            None => {
                patch.insert(key.clone(), value.clone());
            }
        }
    }
    for key in old.keys() {
        if !new.contains_key(key) {
            patch.insert(key.clone(), Value::Null);
        }
    }
    Some(Value::Object(patch))
}

/// Applies a merge patch to `target` (RFC 7386 §2), as the API server does.
pub fn apply_merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(map) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            map.remove(key);
        } else {
            apply_merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quickcheck::{Arbitrary, Gen, TestResult};
    use serde_json::json;

    #[test]
    fn a_patch_names_only_what_changed() {
        let old = json!({
            "metadata": {"name": "pv", "resourceVersion": "7",
                         "annotations": {"a": "1", "b": "2"}, "finalizers": ["x"]},
            "spec": {"capacity": {"storage": "1Gi"}, "csi": {"driver": "d"}}
        });
        let new = json!({
            "metadata": {"name": "pv", "resourceVersion": "7",
                         "annotations": {"a": "1", "c": "3"}, "finalizers": ["x", "y"]},
            "spec": {"capacity": {"storage": "2Gi"}, "csi": {"driver": "d"}}
        });
        assert_eq!(
            merge_patch(&old, &new),
            Some(json!({
                "metadata": {"annotations": {"b": null, "c": "3"}, "finalizers": ["x", "y"]},
                "spec": {"capacity": {"storage": "2Gi"}}
            }))
        );
        assert_eq!(merge_patch(&old, &old), None);
    }

    #[test]
    fn fields_the_model_does_not_know_survive_a_patch() {
        // The server's object has fields the model drops; the patch is
        // computed between two model views, so it never names them.
        let mut server = json!({
            "metadata": {"name": "pvc", "managedFields": [{"manager": "kubectl"}],
                         "labels": {"app": "web"}},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}, "futureField": 1}
        });
        let seen = json!({"metadata": {"name": "pvc", "labels": {"app": "web"}},
                          "spec": {"resources": {"requests": {"storage": "1Gi"}}}});
        let mut changed = seen.clone();
        changed["metadata"]["labels"]["tier"] = json!("db");
        apply_merge_patch(&mut server, &merge_patch(&seen, &changed).unwrap());
        assert_eq!(server["spec"]["futureField"], json!(1));
        assert_eq!(
            server["metadata"]["managedFields"][0]["manager"],
            json!("kubectl")
        );
        assert_eq!(
            server["metadata"]["labels"],
            json!({"app": "web", "tier": "db"})
        );
    }

    /// Small JSON documents with no nulls (the model never writes one).
    #[derive(Debug, Clone, Hash)]
    struct Doc(Value);

    fn doc(g: &mut Gen, depth: u32) -> Value {
        let keys = ["a", "b", "c", "d"];
        match u8::arbitrary(g) % if depth == 0 { 3 } else { 5 } {
            0 => json!(bool::arbitrary(g)),
            1 => json!(u8::arbitrary(g) % 4),
            2 => json!(["x", "y"][usize::from(bool::arbitrary(g))]),
            3 => Value::Array(
                (0..u8::arbitrary(g) % 3)
                    .map(|_| doc(g, depth - 1))
                    .collect(),
            ),
            _ => {
                let mut map = Map::new();
                for k in keys {
                    if bool::arbitrary(g) {
                        map.insert(k.to_string(), doc(g, depth - 1));
                    }
                }
                Value::Object(map)
            }
        }
    }

    impl Arbitrary for Doc {
        fn arbitrary(g: &mut Gen) -> Doc {
            Doc(doc(g, 3))
        }
    }

    fn patch_then_apply(old: Doc, new: Doc) -> TestResult {
        if !old.0.is_object() || !new.0.is_object() {
            return TestResult::discard();
        }
        let mut patched = old.0.clone();
        if let Some(p) = merge_patch(&old.0, &new.0) {
            apply_merge_patch(&mut patched, &p);
        }
        TestResult::from_bool(patched == new.0)
    }

    #[test]
    fn applying_the_patch_gives_the_new_version() {
        crate::control::chaos::checker(500, 20)
            .quickcheck(patch_then_apply as fn(Doc, Doc) -> TestResult);
    }
}
