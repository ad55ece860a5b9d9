//! `CNI_ARGS`: `K1=V1;K2=V2` (SPEC.md "Parameters"; libcni `pkg/types/args.go`).
//!
//! Runtimes send keys the plugin does not know (`K8S_POD_NAME`, ...), and Multus repeats
//! keys (`IgnoreUnknown=1;IgnoreUnknown=1;...`). Unknown keys are always accepted (this
//! plugin reads only what it needs), and a repeated key keeps its last value.
//!
//! Parsing never fails: the Go ib-sriov-cni never parses `CNI_ARGS` at all (skel hands
//! it over as a string and the plugin does not call `types.LoadArgs`), so a runtime that
//! sends a malformed segment worked with it and must keep working here. A segment
//! without `=` or with an empty key is skipped and remembered in [`CniArgs::skipped`],
//! which the entry point logs as a warning once the logger is set up. Delegated plugins
//! receive the string exactly as received ([`CniArgs::raw`]).

/// Parsed `CNI_ARGS` in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs {
    /// The variable as received.
    raw: String,
    /// Well-formed `KEY=VALUE` pairs, in order, duplicates kept.
    pairs: Vec<(String, String)>,
    /// Malformed segments that were skipped, in order.
    skipped: Vec<String>,
}

impl CniArgs {
    /// Parses `K=V` pairs separated by `;`. Empty segments (a trailing `;`) are ignored;
    /// a segment without `=` or with an empty key (`=v`) is skipped and listed in
    /// [`CniArgs::skipped`]. A value may contain `=` (split at the first one).
    ///
    /// Never fails (see the module docs for why).
    pub fn parse(s: &str) -> Self {
        let mut pairs = Vec::new();
        let mut skipped = Vec::new();
        for seg in s.split(';') {
            if seg.is_empty() {
                continue;
            }
            match seg.split_once('=') {
                Some((k, v)) if !k.is_empty() => pairs.push((k.to_string(), v.to_string())),
                _ => skipped.push(seg.to_string()),
            }
        }
        CniArgs {
            raw: s.to_string(),
            pairs,
            skipped,
        }
    }

    /// The value of `key`; the last one when the key is repeated.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// All well-formed pairs in the order given, duplicates included.
    pub fn pairs(&self) -> &[(String, String)] {
        &self.pairs
    }

    /// The malformed segments that were skipped (no `=`, or an empty key), in order.
    pub fn skipped(&self) -> &[String] {
        &self.skipped
    }

    /// `CNI_ARGS` exactly as received (what a delegated plugin gets, SPEC.md section 4:
    /// "the same environment").
    pub fn raw(&self) -> &str {
        &self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multus_style_args_with_repeated_keys() {
        let a = CniArgs::parse(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=p-0;IgnoreUnknown=true;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1",
        );
        assert_eq!(a.get("K8S_POD_NAME"), Some("p-0"));
        assert_eq!(a.get("IgnoreUnknown"), Some("true"));
        assert_eq!(a.pairs().len(), 6);
        assert_eq!(a.get("missing"), None);
        assert!(a.skipped().is_empty());
    }

    #[test]
    fn empty_and_trailing_separators() {
        assert!(CniArgs::parse("").pairs().is_empty());
        let a = CniArgs::parse("A=1;;B=;");
        assert_eq!(a.get("A"), Some("1"));
        assert_eq!(a.get("B"), Some(""));
        assert!(a.skipped().is_empty());
    }

    #[test]
    fn value_may_contain_equals() {
        let a = CniArgs::parse("GUID=a=b");
        assert_eq!(a.get("GUID"), Some("a=b"));
    }

    #[test]
    fn malformed_segments_are_skipped_and_well_formed_ones_kept() {
        let raw = "IgnoreUnknown=1;garbage;=v;K8S_POD_NAME=p;;x";
        let a = CniArgs::parse(raw);
        assert_eq!(
            a.pairs(),
            &[
                ("IgnoreUnknown".to_string(), "1".to_string()),
                ("K8S_POD_NAME".to_string(), "p".to_string())
            ]
        );
        assert_eq!(a.skipped(), &["garbage", "=v", "x"]);
        assert_eq!(a.raw(), raw);
    }
}
