//! `CNI_ARGS`: `K1=V1;K2=V2` (SPEC.md "Parameters"; libcni `pkg/types/args.go`).
//!
//! Runtimes send keys the plugin does not know (`K8S_POD_NAME`, ...), and Multus repeats
//! keys (`IgnoreUnknown=1;IgnoreUnknown=1;...`). Unknown keys are always accepted (this
//! plugin reads only what it needs), and a repeated key keeps its last value.

use super::error::CniError;

/// Parsed `CNI_ARGS` in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    pairs: Vec<(String, String)>,
}

impl CniArgs {
    /// Parses `K=V` pairs separated by `;`. Empty segments (a trailing `;`) are skipped.
    ///
    /// Errors (code 4): a segment without `=`, or an empty key.
    pub fn parse(s: &str) -> Result<Self, CniError> {
        let mut pairs = Vec::new();
        for seg in s.split(';') {
            if seg.is_empty() {
                continue;
            }
            let (k, v) = seg.split_once('=').ok_or_else(|| {
                CniError::env(format!(
                    "CNI_ARGS: invalid segment {seg:?}: expected KEY=VALUE pairs separated by ';'"
                ))
            })?;
            if k.is_empty() {
                return Err(CniError::env(format!(
                    "CNI_ARGS: empty key in segment {seg:?}"
                )));
            }
            pairs.push((k.to_string(), v.to_string()));
        }
        Ok(CniArgs { pairs })
    }

    /// The value of `key`; the last one when the key is repeated.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All pairs in the order given, duplicates included.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multus_style_args_with_repeated_keys() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p-0;IgnoreUnknown=true;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
        )
        .unwrap();
        assert_eq!(a.get("K8S_POD_NAME"), Some("p-0"));
        assert_eq!(a.get("IgnoreUnknown"), Some("true"));
        assert_eq!(a.pairs().len(), 6);
        assert_eq!(a.get("missing"), None);
    }

    #[test]
    fn empty_and_trailing_separators() {
        assert!(CniArgs::parse("").unwrap().pairs().is_empty());
        let a = CniArgs::parse("A=1;;B=;").unwrap();
        assert_eq!(a.get("A"), Some("1"));
        assert_eq!(a.get("B"), Some(""));
    }

    #[test]
    fn value_may_contain_equals() {
        let a = CniArgs::parse("GUID=a=b").unwrap();
        assert_eq!(a.get("GUID"), Some("a=b"));
    }

    #[test]
    fn rejects_segment_without_equals_with_code_4() {
        let e = CniArgs::parse("IgnoreUnknown=1;garbage").unwrap_err();
        assert_eq!(e.code, 4);
        assert!(e.msg.contains("garbage"));
        assert_eq!(CniArgs::parse("=v").unwrap_err().code, 4);
    }
}
