//! The SR-IOV network operator's static VF GUID file, read as the operator reads it
//! (k8snetworkplumbingwg/sriov-network-operator, doc/design/ib-vf-configuration.md and
//! `pkg/host/internal/infiniband/ib_guid_config.go`, `ib_guid_pool.go`):
//!
//! ```json
//! [
//!   {"pciAddress": "0000:3b:00.0", "guids": ["02:00:00:00:00:00:00:01", "02:00:00:00:00:00:00:02"]},
//!   {"pfGuid": "0c:42:a1:03:00:b1:c2:d2", "rangeStart": "02:00:00:00:00:aa:00:00", "rangeEnd": "02:00:00:00:00:aa:00:7e"}
//! ]
//! ```
//!
//! - A JSON list of entries. Each names its PF by exactly one of `pciAddress` or
//!   `pfGuid`, and gives exactly one of a `guids` list or a range: `rangeStart` and
//!   `rangeEnd` (the operator's code), or `guidsRange: {"start", "end"}` (its design
//!   document's form). Both range ends are included, and the end must be greater than the
//!   start.
//! - VF N takes `guids[N]`, or `start + N`; an index past the end of the list or the
//!   range is an error, never a wrap-around (the operator's "guid pool exhausted").
//! - Any malformed entry makes the whole file invalid, as in the operator. Keys it does
//!   not know are ignored, as Go's `encoding/json` ignores them.
//! - Two entries for one PF: the last one wins, as in the operator's code (its map of
//!   entries by PCI address is overwritten in file order).
//! - `pfGuid` matches a PF whose netdev hardware address prints as that text (the
//!   operator's rule: `HardwareAddr.String()`, lowercase, colon-separated, so the full
//!   20-byte address for IPoIB) or whose port GUID it is. An entry whose `pfGuid`
//!   matches no PF here is not an error for this VF (the operator fails on it; this
//!   plugin only ever needs the entry of the VF's own PF).
//! - GUIDs must be eight octets (`02:00:00:00:00:00:00:01`, `:` or `-` separated) and
//!   neither all-zero nor all-ones.

use super::PfIdentity;
use crate::types::{Guid, PciAddress, VfIndex};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Largest GUID file read, in bytes (a node has at most a few thousand VFs).
const MAX_FILE: u64 = 4 << 20;

/// An error in or about the GUID file: the file, the entry (from 0) when one is at
/// fault, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidFileError {
    /// The file.
    pub path: PathBuf,
    /// The entry at fault, when one is.
    pub entry: Option<usize>,
    /// What is wrong.
    pub msg: String,
}

impl std::fmt::Display for GuidFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.entry {
            Some(i) => write!(
                f,
                "VF GUID file {}: entry {i}: {}",
                self.path.display(),
                self.msg
            ),
            None => write!(f, "VF GUID file {}: {}", self.path.display(), self.msg),
        }
    }
}

impl std::error::Error for GuidFileError {}

/// How an entry names its PF.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PfKey {
    /// `pciAddress`.
    Pci(PciAddress),
    /// `pfGuid`, as written (compared case-insensitively).
    PfGuid(String),
}

/// The GUIDs of an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GuidSet {
    /// `guids`: VF N takes element N.
    List(Vec<Guid>),
    /// `rangeStart`..=`rangeEnd`: VF N takes start + N.
    Range(Guid, Guid),
}

/// One entry of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its PF.
    pub pf: PfKey,
    /// Its GUIDs.
    pub guids: GuidSet,
}

/// A parsed, valid GUID file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuidFile {
    /// The file.
    pub path: PathBuf,
    /// Its entries, in file order.
    pub entries: Vec<Entry>,
}

/// A GUID in the file's forms: eight hex octets separated by `:` or `-`.
fn parse_guid(s: &str) -> Result<Guid, String> {
    let g: Guid = s
        .replace('-', ":")
        .parse()
        .map_err(|e: crate::types::GuidParseError| e.to_string())?;
    if !g.is_assignable() {
        return Err(format!(
            "GUID {s:?} cannot be assigned to a VF (all-zero and all-ones GUIDs are reserved)"
        ));
    }
    Ok(g)
}

fn str_key<'a>(o: &'a serde_json::Map<String, Value>, k: &str) -> Result<Option<&'a str>, String> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(format!("{k} must be a string, got {other}")),
    }
}

fn parse_entry(v: &Value) -> Result<Entry, String> {
    let o = v
        .as_object()
        .ok_or_else(|| format!("expected an object, got {v}"))?;
    let pf = match (str_key(o, "pciAddress")?, str_key(o, "pfGuid")?) {
        (Some(_), Some(_)) => {
            return Err(
                "either pciAddress or pfGuid required to describe a PF, both provided".into(),
            )
        }
        (Some(p), None) => PfKey::Pci(p.parse().map_err(|e| format!("pciAddress {p:?}: {e}"))?),
        (None, Some(g)) => PfKey::PfGuid(g.to_ascii_lowercase()),
        (None, None) => {
            return Err(
                "either pciAddress or pfGuid required to describe a PF, none provided".into(),
            )
        }
    };
    let list = match o.get("guids") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) if a.is_empty() => None,
        Some(Value::Array(a)) => Some(
            a.iter()
                .map(|g| match g {
                    Value::String(s) => parse_guid(s),
                    other => Err(format!("guids: expected GUID strings, got {other}")),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("guids: {e}"))?,
        ),
        Some(other) => return Err(format!("guids must be a list, got {other}")),
    };
    let mut start = str_key(o, "rangeStart")?.map(str::to_string);
    let mut end = str_key(o, "rangeEnd")?.map(str::to_string);
    match o.get("guidsRange") {
        None | Some(Value::Null) => {}
        Some(Value::Object(r)) => {
            if start.is_some() || end.is_some() {
                return Err("guidsRange and rangeStart/rangeEnd both given".into());
            }
            start = str_key(r, "start")
                .map_err(|e| format!("guidsRange.{e}"))?
                .map(str::to_string);
            end = str_key(r, "end")
                .map_err(|e| format!("guidsRange.{e}"))?
                .map(str::to_string);
        }
        Some(other) => return Err(format!("guidsRange must be an object, got {other}")),
    }
    let guids = match (list, start, end) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err("either a guid list or a guid range should be provided, got both".into())
        }
        (Some(l), None, None) => GuidSet::List(l),
        (None, Some(s), Some(e)) => {
            let s = parse_guid(&s).map_err(|e| format!("range start: {e}"))?;
            let e = parse_guid(&e).map_err(|e| format!("range end: {e}"))?;
            if e <= s {
                return Err(format!(
                    "range end {e} must be greater than range start {s}"
                ));
            }
            GuidSet::Range(s, e)
        }
        (None, Some(_), None) | (None, None, Some(_)) => {
            return Err("both a range start and a range end should be provided, got one".into())
        }
        (None, None, None) => {
            return Err("either a guid list or a guid range should be provided, got none".into())
        }
    };
    Ok(Entry { pf, guids })
}

/// The text Go's `net.HardwareAddr.String()` gives for `addr`: lowercase hex octets
/// joined by `:`.
pub fn hwaddr_text(addr: &[u8]) -> String {
    addr.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

impl GuidFile {
    /// Parses the file's bytes; `path` names it in errors.
    ///
    /// Errors: not a JSON list of objects; any malformed entry (naming its index).
    pub fn parse(path: &Path, bytes: &[u8]) -> Result<GuidFile, GuidFileError> {
        let err = |entry, msg: String| GuidFileError {
            path: path.to_path_buf(),
            entry,
            msg,
        };
        let v: Value =
            serde_json::from_slice(bytes).map_err(|e| err(None, format!("not valid JSON: {e}")))?;
        let list = v
            .as_array()
            .ok_or_else(|| err(None, "expected a JSON list of entries".into()))?;
        let entries = list
            .iter()
            .enumerate()
            .map(|(i, e)| parse_entry(e).map_err(|m| err(Some(i), m)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(GuidFile {
            path: path.to_path_buf(),
            entries,
        })
    }

    /// Reads and parses the file at `path` (symlinks followed; at most 4 MiB);
    /// `Ok(None)` when nothing is there.
    ///
    /// Errors: unreadable (not a regular file, permissions, too large), or malformed
    /// ([`GuidFile::parse`]).
    pub fn load(path: &Path) -> Result<Option<GuidFile>, GuidFileError> {
        let err = |msg: String| GuidFileError {
            path: path.to_path_buf(),
            entry: None,
            msg,
        };
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(err(format!("cannot be resolved: {e}"))),
        };
        let bytes = crate::fsutil::read_regular_bounded(&real, MAX_FILE)
            .map_err(|e| err(format!("cannot be read: {e}")))?;
        Self::parse(path, &bytes).map(Some)
    }

    /// The index of the entry for `pf` (the last one that matches), if any.
    pub fn entry_for(&self, pf: &PfIdentity) -> Option<usize> {
        let texts: Vec<String> = pf.hwaddrs.iter().map(|a| hwaddr_text(a)).collect();
        let port = pf.port_guid.map(|(g, _)| g.to_string());
        self.entries.iter().rposition(|e| match &e.pf {
            PfKey::Pci(p) => pf.pci == Some(*p),
            PfKey::PfGuid(g) => texts.iter().any(|t| t == g) || port.as_deref() == Some(g),
        })
    }

    /// The GUID VF `vf` of `pf` takes and the index of the entry that gives it;
    /// `Ok(None)` when no entry names the PF.
    ///
    /// Errors: the VF index is past the end of the entry's list or range.
    pub fn lookup(
        &self,
        pf: &PfIdentity,
        vf: VfIndex,
    ) -> Result<Option<(Guid, usize)>, GuidFileError> {
        let Some(i) = self.entry_for(pf) else {
            return Ok(None);
        };
        let n = vf.0 as usize;
        let g = match &self.entries[i].guids {
            GuidSet::List(l) => l.get(n).copied().ok_or_else(|| {
                format!(
                    "VF {n} of PF {} is past the end of the entry's guids list ({} GUIDs, for VFs 0 to {})",
                    pf.pci.map(|p| p.to_string()).unwrap_or_default(),
                    l.len(),
                    l.len() - 1
                )
            }),
            GuidSet::Range(s, e) => s
                .0
                .checked_add(n as u64)
                .filter(|g| *g <= e.0)
                .map(Guid)
                .ok_or_else(|| {
                    format!(
                        "VF {n} of PF {} is past the end of the entry's range {s} to {e} ({} GUIDs)",
                        pf.pci.map(|p| p.to_string()).unwrap_or_default(),
                        e.0 - s.0 + 1
                    )
                }),
        }
        .map_err(|msg| GuidFileError {
            path: self.path.clone(),
            entry: Some(i),
            msg,
        })?;
        Ok(Some((g, i)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vfguid::PortGuidSource;

    fn g(s: &str) -> Guid {
        s.parse().unwrap()
    }

    fn pf(pci: &str) -> PfIdentity {
        PfIdentity {
            pci: Some(pci.parse().unwrap()),
            hwaddrs: vec![vec![
                0, 0, 0x10, 0x49, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x0c, 0x42, 0xa1, 0x03, 0, 0xb1,
                0xc2, 0xd2,
            ]],
            port_guid: Some((g("0c:42:a1:03:00:b1:c2:d2"), PortGuidSource::IpoibAddress)),
        }
    }

    fn parse(s: &str) -> Result<GuidFile, GuidFileError> {
        GuidFile::parse(Path::new("/etc/g"), s.as_bytes())
    }

    #[test]
    fn list_and_range_by_pci_and_pf_guid() {
        let f = parse(
            r#"[{"pciAddress":"0000:3b:00.0","guids":["02:00:00:00:00:00:00:01","02-00-00-00-00-00-00-02"]},
                {"pfGuid":"0C:42:A1:03:00:B1:C2:D2","rangeStart":"02:00:00:00:00:aa:00:00","rangeEnd":"02:00:00:00:00:aa:00:7e"},
                {"pciAddress":"0000:5e:00.0","guidsRange":{"start":"06:00:00:00:00:00:01:00","end":"06:00:00:00:00:00:01:01"}}]"#,
        )
        .unwrap();
        let a = pf("0000:3b:00.0");
        // 0000:3b:00.0 also has the pfGuid of entry 1: the last matching entry wins.
        assert_eq!(f.entry_for(&a), Some(1));
        let mut only_pci = a.clone();
        only_pci.hwaddrs.clear();
        only_pci.port_guid = None;
        assert_eq!(
            f.lookup(&only_pci, VfIndex(1)).unwrap(),
            Some((g("02:00:00:00:00:00:00:02"), 0))
        );
        assert_eq!(
            f.lookup(&a, VfIndex(126)).unwrap(),
            Some((g("02:00:00:00:00:aa:00:7e"), 1))
        );
        let e = f.lookup(&a, VfIndex(127)).unwrap_err();
        assert_eq!(e.entry, Some(1));
        assert!(e.to_string().contains("past the end"), "{e}");
        let e = f.lookup(&only_pci, VfIndex(2)).unwrap_err();
        assert!(e.to_string().contains("entry 0: VF 2"), "{e}");
        let c = pf("0000:5e:00.0");
        let mut c = c;
        c.hwaddrs.clear();
        c.port_guid = None;
        assert_eq!(
            f.lookup(&c, VfIndex(1)).unwrap(),
            Some((g("06:00:00:00:00:00:01:01"), 2))
        );
        // Another PCI address with entry 1's pfGuid: matched by the port GUID.
        assert_eq!(
            f.lookup(&pf("0000:99:00.0"), VfIndex(0)).unwrap(),
            Some((g("02:00:00:00:00:aa:00:00"), 1))
        );
        let mut none = pf("0000:99:00.0");
        none.hwaddrs.clear();
        none.port_guid = None;
        assert_eq!(f.lookup(&none, VfIndex(0)).unwrap(), None);
    }

    #[test]
    fn pf_guid_matches_the_full_ipoib_address_as_the_operator_prints_it() {
        let f = parse(
            r#"[{"pfGuid":"00:00:10:49:fe:80:00:00:00:00:00:00:0c:42:a1:03:00:b1:c2:d2","guids":["02:00:00:00:00:00:00:09"]}]"#,
        )
        .unwrap();
        assert_eq!(
            f.lookup(&pf("0000:3b:00.0"), VfIndex(0)).unwrap(),
            Some((g("02:00:00:00:00:00:00:09"), 0))
        );
    }

    #[test]
    fn malformed_files_name_the_entry() {
        for (text, entry, want) in [
            ("{}", None, "expected a JSON list"),
            ("[invalid", None, "not valid JSON"),
            (
                r#"[{"guids":["02:00:00:00:00:00:00:01"]}]"#,
                Some(0),
                "none provided",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","pfGuid":"x","guids":["02:00:00:00:00:00:00:01"]}]"#,
                Some(0),
                "both provided",
            ),
            (r#"[{"pciAddress":"0000:3b:00.0"}]"#, Some(0), "got none"),
            (
                r#"[{"pciAddress":"0000:3b:00.0","guids":["02:00:00:00:00:00:00:01"],"rangeStart":"02:00:00:00:00:00:00:01"}]"#,
                Some(0),
                "got both",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","guids":["02:00:00:00:00:00:00:01"]},{"pciAddress":"0000:3b:00.1","rangeStart":"02:00:00:00:00:00:00:01"}]"#,
                Some(1),
                "got one",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","rangeStart":"02:00:00:00:00:00:00:ff","rangeEnd":"02:00:00:00:00:00:00:aa"}]"#,
                Some(0),
                "greater than",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","guids":["invalid_guid"]}]"#,
                Some(0),
                "invalid_guid",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","guids":["00:00:00:00:00:00:00:00"]}]"#,
                Some(0),
                "cannot be assigned",
            ),
            (
                r#"[{"pciAddress":"3b:00","guids":["02:00:00:00:00:00:00:01"]}]"#,
                Some(0),
                "pciAddress",
            ),
            (
                r#"[{"pciAddress":"0000:3b:00.0","guids":"02:00:00:00:00:00:00:01"}]"#,
                Some(0),
                "must be a list",
            ),
            // The design document's snake_case example keys are not the operator's.
            (
                r#"[{"pci_address":"0000:3b:00.0","guids":["02:00:00:00:00:00:00:01"]}]"#,
                Some(0),
                "none provided",
            ),
        ] {
            let e = parse(text).unwrap_err();
            assert_eq!(e.entry, entry, "{text}: {e}");
            assert!(e.to_string().contains(want), "{text}: {e}");
            assert!(e.to_string().starts_with("VF GUID file /etc/g"), "{e}");
        }
    }

    #[test]
    fn an_absent_file_is_none_and_a_directory_an_error() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(GuidFile::load(&d.path().join("nope")).unwrap(), None);
        assert!(GuidFile::load(d.path()).is_err());
        let p = d.path().join("guids");
        std::fs::write(
            &p,
            r#"[{"pciAddress":"0000:3b:00.0","guids":["02:00:00:00:00:00:00:01"]}]"#,
        )
        .unwrap();
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert_eq!(GuidFile::load(&link).unwrap().unwrap().entries.len(), 1);
    }
}
