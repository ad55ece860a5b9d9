//! What `doctor --conf FILE` reads: a network configuration or conflist as a node keeps
//! it (JSON), or NetworkAttachmentDefinitions as the cluster keeps them (YAML, one or
//! several `---` documents, or the JSON `kubectl get -o json` prints, a `List` of them
//! included), each NAD's `spec.config` being its configuration (a JSON string).
//!
//! The NAD's shape: group `k8s.cni.cncf.io`, `kind: NetworkAttachmentDefinition`,
//! `spec.config` a string (k8snetworkplumbingwg/multus-cni 95a0932
//! `deployments/multus-daemonset.yml`, the CRD's schema); a NAD without `spec.config`
//! makes Multus read the file of that name from each node's `/etc/cni/multus/net.d`
//! (same commit, `docs/how-to-use.md`).

use saphyr::{LoadableYamlNode, Scalar, Yaml};
use serde_json::Value;

/// The `kind` of a NetworkAttachmentDefinition.
pub const NAD_KIND: &str = "NetworkAttachmentDefinition";

/// One configuration found in the `--conf` file.
#[derive(Debug)]
pub enum Item {
    /// A configuration or conflist: `nad` is the NetworkAttachmentDefinition it is the
    /// `spec.config` of (`namespace/name`, or `name` when the document names no
    /// namespace), `None` for a node's file.
    Conf { nad: Option<String>, conf: Value },
    /// A NetworkAttachmentDefinition whose `spec.config` cannot be used: its
    /// `namespace/name` and why (an error: Multus fails every pod of it).
    BadNad { nad: String, why: String },
    /// A NetworkAttachmentDefinition without `spec.config`: its `namespace/name`;
    /// Multus reads the node's file of that name instead.
    NodeFileNad { nad: String },
}

/// The items of the `--conf` file `bytes`, in order: JSON (a configuration, a conflist,
/// or Kubernetes objects), else YAML documents. Documents of other kinds are skipped.
///
/// Errors: the file is neither (the JSON error when it starts with `{` or `[`, else
/// the YAML one), or names no configuration and no NetworkAttachmentDefinition.
pub fn read(bytes: &[u8]) -> Result<Vec<Item>, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text: {e}"))?;
    let docs: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(v) => vec![v],
        Err(e) if text.trim_start().starts_with(['{', '[']) => {
            return Err(format!("not JSON: {e}"))
        }
        Err(_) => Yaml::load_from_str(text)
            .map_err(|e| format!("neither JSON nor YAML: {e}"))?
            .iter()
            .map(to_json)
            .collect(),
    };
    let mut out = Vec::new();
    for d in docs {
        objects(d, &mut out);
    }
    if out.is_empty() {
        return Err(format!(
            "no network configuration in it (a configuration or conflist, or a {NAD_KIND} with spec.config)"
        ));
    }
    Ok(out)
}

/// The items of one document `d`: a `List`'s items each, a NAD, or (no `kind`) a
/// configuration or conflist as a node keeps it.
fn objects(d: Value, out: &mut Vec<Item>) {
    match d.get("kind").and_then(Value::as_str) {
        None if d.is_object() => out.push(Item::Conf { nad: None, conf: d }),
        Some(k) if k.ends_with("List") => {
            if let Some(Value::Array(items)) = d.get("items") {
                for i in items.clone() {
                    objects(i, out);
                }
            }
        }
        Some(NAD_KIND) => out.push(nad(&d)),
        _ => {}
    }
}

/// The item of the NetworkAttachmentDefinition `d`.
fn nad(d: &Value) -> Item {
    let meta = |k: &str| {
        d.get("metadata")
            .and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let nad = match (meta("namespace"), meta("name")) {
        ("", n) => n.to_string(),
        (ns, n) => format!("{ns}/{n}"),
    };
    match d.get("spec").and_then(|s| s.get("config")) {
        None | Some(Value::Null) => Item::NodeFileNad { nad },
        Some(Value::String(s)) if s.trim().is_empty() => Item::NodeFileNad { nad },
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(conf @ Value::Object(_)) => Item::Conf {
                nad: Some(nad),
                conf,
            },
            Ok(_) => Item::BadNad {
                nad,
                why: "spec.config is not a JSON object".into(),
            },
            Err(e) => Item::BadNad {
                nad,
                why: format!("spec.config is not JSON: {e}"),
            },
        },
        Some(other) => Item::BadNad {
            nad,
            why: format!("spec.config must be a string (JSON text), got {other}"),
        },
    }
}

/// A YAML node as JSON: scalars as resolved by the YAML 1.2 core schema, mappings with
/// their keys as strings, tags dropped; aliases (not resolved) and unresolvable values
/// become `null`.
fn to_json(y: &Yaml) -> Value {
    match y {
        Yaml::Value(s) => scalar(s),
        Yaml::Representation(s, _, _) => Value::String(s.to_string()),
        Yaml::Sequence(seq) => Value::Array(seq.iter().map(to_json).collect()),
        Yaml::Mapping(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let key = match to_json(k) {
                        Value::String(s) => s,
                        other => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        Yaml::Tagged(_, inner) => to_json(inner),
        Yaml::Alias(_) | Yaml::BadValue => Value::Null,
    }
}

fn scalar(s: &Scalar) -> Value {
    match s {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::from(*i),
        Scalar::FloatingPoint(f) => {
            serde_json::Number::from_f64(f.into_inner()).map_or(Value::Null, Value::Number)
        }
        Scalar::String(s) => Value::String(s.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nads_in_yaml_and_json_and_node_files() {
        let yaml = r#"
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: ib-a
  namespace: team-a
spec:
  config: '{"cniVersion": "1.0.0", "name": "ib-a", "type": "ib-sriov", "pkey": "0x8001"}'
---
apiVersion: v1
kind: ConfigMap
metadata: {name: other}
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: ib-b
spec:
  config: |
    {"cniVersion": "1.0.0", "name": "ib-b", "plugins": [{"type": "ib-sriov"}]}
---
kind: NetworkAttachmentDefinition
metadata: {name: ib-c, namespace: x}
---
kind: NetworkAttachmentDefinition
metadata: {name: ib-d, namespace: x}
spec: {config: "{nope"}
"#;
        let items = read(yaml.as_bytes()).unwrap();
        assert_eq!(items.len(), 4, "{items:?}");
        match &items[0] {
            Item::Conf { nad, conf } => {
                assert_eq!(nad.as_deref(), Some("team-a/ib-a"));
                assert_eq!(conf["pkey"], "0x8001");
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&items[1], Item::Conf { nad: Some(n), conf } if n == "ib-b" && conf["plugins"][0]["type"] == "ib-sriov")
        );
        assert!(matches!(&items[2], Item::NodeFileNad { nad } if nad == "x/ib-c"));
        assert!(
            matches!(&items[3], Item::BadNad { nad, why } if nad == "x/ib-d" && why.starts_with("spec.config is not JSON"))
        );
        // kubectl get -o json of several: a List.
        let list = serde_json::json!({"kind": "List", "items": [
            {"kind": NAD_KIND, "metadata": {"name": "n", "namespace": "d"},
             "spec": {"config": "{\"type\": \"ib-sriov\"}"}}]});
        let items = read(list.to_string().as_bytes()).unwrap();
        assert!(matches!(&items[..], [Item::Conf { nad: Some(n), .. }] if n == "d/n"));
        // A node's file.
        let items = read(br#"{"cniVersion": "1.0.0", "name": "n", "type": "ib-sriov"}"#).unwrap();
        assert!(matches!(&items[..], [Item::Conf { nad: None, .. }]));
        assert!(read(b"{garbage").unwrap_err().starts_with("not JSON"));
        assert!(read(b"a: [")
            .unwrap_err()
            .starts_with("neither JSON nor YAML"));
        assert!(read(b"kind: ConfigMap\n")
            .unwrap_err()
            .starts_with("no network configuration"));
    }
}
