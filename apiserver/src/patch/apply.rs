//! Server-side apply: field ownership in `metadata.managedFields` (FieldsV1), merge of an applied
//! configuration into the live object, removal of fields a manager stopped applying, and
//! conflicts when two managers want different values for one field.

use serde_json::{Map, Value, json};
use std::collections::{BTreeSet, HashMap, HashSet};

/// How a list merges under apply, from `x-kubernetes-list-type` or the built-in tables.
#[derive(Debug, Clone, PartialEq)]
pub enum ListType {
    Atomic,
    Set,
    Map(Vec<String>),
}

/// A path through an object in FieldsV1 element syntax (`f:name`, `k:{..}`, `v:..`).
pub type FieldPath = Vec<String>;
pub type FieldSet = BTreeSet<FieldPath>;

/// Looks up how a field merges, by its dotted path (map-list keys omitted).
pub trait ListTypes {
    fn list_type(&self, dotted: &str) -> ListType;

    /// Whether the map or struct at `dotted` is `x-kubernetes-map-type: atomic`: owned,
    /// compared and replaced as one value.
    fn atomic_map(&self, _dotted: &str) -> bool {
        false
    }
}

impl<F: Fn(&str) -> ListType> ListTypes for F {
    fn list_type(&self, dotted: &str) -> ListType {
        self(dotted)
    }
}

/// Fields that belong to the server and are never owned by a manager.
const UNOWNED_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
    "generateName",
];

fn join(dotted: &str, k: &str) -> String {
    if dotted.is_empty() {
        k.to_string()
    } else {
        format!("{dotted}.{k}")
    }
}

fn key_of(elem: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), elem.get(k).cloned().unwrap_or(Value::Null));
    }
    format!("k:{}", Value::Object(m))
}

/// The set of leaf fields `v` sets.
pub fn fields_of(v: &Value, types: &dyn ListTypes) -> FieldSet {
    let mut walk = Walk {
        types,
        after: FieldSet::new(),
        changed: None,
    };
    walk.object(None, v);
    walk.after
}

/// The fields `new` sets (as [`fields_of`]), and those of them whose value is not the same in
/// `old`, in one walk of both objects. A subtree equal in both is only listed. Looking each
/// field up in both objects from the top instead was a fifth of the API server's CPU at a
/// thousand clusters: a status write's conditions are a keyed list, and every lookup through
/// it parsed each element's key again.
fn fields_and_changes(old: &Value, new: &Value, types: &dyn ListTypes) -> (FieldSet, FieldSet) {
    let mut walk = Walk {
        types,
        after: FieldSet::new(),
        changed: Some(FieldSet::new()),
    };
    walk.object(Some(old), new);
    (walk.after, walk.changed.unwrap_or_default())
}

struct Walk<'a> {
    types: &'a dyn ListTypes,
    after: FieldSet,
    /// `None` when only the fields are wanted ([`fields_of`]).
    changed: Option<FieldSet>,
}

impl Walk<'_> {
    /// The fields of a whole object: its metadata's but the server's, and its other members'
    /// but `apiVersion` and `kind`.
    fn object(&mut self, old: Option<&Value>, new: &Value) {
        let Value::Object(m) = new else {
            return;
        };
        for (k, c) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            let before = old.and_then(|o| o.get(k));
            if k == "metadata" {
                if let Value::Object(meta) = c {
                    for (mk, mc) in meta {
                        if !UNOWNED_META.contains(&mk.as_str()) {
                            let mut p = vec!["f:metadata".to_string(), format!("f:{mk}")];
                            let before = before.and_then(|b| b.get(mk));
                            self.diff(before, mc, &mut p, &format!("metadata.{mk}"));
                        }
                    }
                }
                continue;
            }
            let mut p = vec![format!("f:{k}")];
            self.diff(before, c, &mut p, k);
        }
    }

    /// [`collect`] of `v`, noting as changed each field whose value in `old` differs.
    fn diff(&mut self, old: Option<&Value>, v: &Value, path: &mut FieldPath, dotted: &str) {
        if old == Some(v) || self.changed.is_none() {
            collect(v, path, dotted, self.types, &mut self.after);
            return;
        }
        match v {
            Value::Object(m) if !m.is_empty() && !self.types.atomic_map(dotted) => {
                for (k, c) in m {
                    path.push(format!("f:{k}"));
                    self.diff(old.and_then(|o| o.get(k)), c, path, &join(dotted, k));
                    path.pop();
                }
            }
            Value::Array(items) => match self.types.list_type(dotted) {
                ListType::Atomic => self.leaf(path, true),
                ListType::Set => {
                    let before = old.and_then(Value::as_array);
                    for e in items {
                        path.push(format!("v:{e}"));
                        self.leaf(path, !before.is_some_and(|b| b.contains(e)));
                        path.pop();
                    }
                }
                ListType::Map(keys) => {
                    // The first of equal keys, as a lookup by key finds it.
                    let mut before: HashMap<String, &Value> = HashMap::new();
                    for e in old.and_then(Value::as_array).into_iter().flatten() {
                        before.entry(key_of(e, &keys)).or_insert(e);
                    }
                    let mut seen = HashSet::new();
                    for e in items {
                        let step = key_of(e, &keys);
                        // A lookup by key finds the first of equal keys: a later one's fields
                        // are listed, and compared as the first one's.
                        let was = if seen.insert(step.clone()) {
                            before.get(&step).copied()
                        } else {
                            Some(e)
                        };
                        path.push(step);
                        self.leaf(path, was != Some(e));
                        if let Value::Object(m) = e {
                            for (k, c) in m {
                                path.push(format!("f:{k}"));
                                self.diff(was.and_then(|o| o.get(k)), c, path, &join(dotted, k));
                                path.pop();
                            }
                        }
                        path.pop();
                    }
                }
            },
            _ => self.leaf(path, true),
        }
    }

    fn leaf(&mut self, path: &FieldPath, changed: bool) {
        if changed && let Some(set) = self.changed.as_mut() {
            set.insert(path.clone());
        }
        self.after.insert(path.clone());
    }
}

fn collect(
    v: &Value,
    path: &mut FieldPath,
    dotted: &str,
    types: &dyn ListTypes,
    out: &mut FieldSet,
) {
    match v {
        Value::Object(m) if !m.is_empty() && !types.atomic_map(dotted) => {
            for (k, c) in m {
                path.push(format!("f:{k}"));
                collect(c, path, &join(dotted, k), types, out);
                path.pop();
            }
        }
        Value::Array(items) => match types.list_type(dotted) {
            ListType::Atomic => {
                out.insert(path.clone());
            }
            ListType::Set => {
                for e in items {
                    path.push(format!("v:{e}"));
                    out.insert(path.clone());
                    path.pop();
                }
            }
            ListType::Map(keys) => {
                for e in items {
                    path.push(key_of(e, &keys));
                    out.insert(path.clone());
                    if let Value::Object(m) = e {
                        for (k, c) in m {
                            path.push(format!("f:{k}"));
                            collect(c, path, &join(dotted, k), types, out);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            out.insert(path.clone());
        }
    }
}

/// A list-element step (`k:{..}` or `v:..`) parsed once, to test a list's elements against:
/// parsing it per element was most of the cost of following a path through a list.
enum Step {
    Keys(Map<String, Value>),
    Value(Value),
    None,
}

impl Step {
    fn parse(step: &str) -> Step {
        if let Some(k) = step.strip_prefix("k:") {
            match serde_json::from_str::<Value>(k) {
                Ok(Value::Object(keys)) => Step::Keys(keys),
                _ => Step::None,
            }
        } else if let Some(v) = step.strip_prefix("v:") {
            serde_json::from_str::<Value>(v).map_or(Step::None, Step::Value)
        } else {
            Step::None
        }
    }

    fn matches(&self, e: &Value) -> bool {
        match self {
            Step::Keys(keys) => keys
                .iter()
                .all(|(kk, kv)| e.get(kk).unwrap_or(&Value::Null) == kv),
            Step::Value(v) => v == e,
            Step::None => false,
        }
    }
}

/// The value at `path`, if present.
pub fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for step in path {
        cur = match (cur, step.strip_prefix("f:")) {
            (Value::Object(m), Some(f)) => m.get(f)?,
            (Value::Array(a), None) => {
                let step = Step::parse(step);
                a.iter().find(|e| step.matches(e))?
            }
            _ => return None,
        };
    }
    Some(cur)
}

/// Deletes the field or list element at `path`.
pub fn remove(v: &mut Value, path: &[String]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut cur = v;
    for step in parent {
        let next = match (cur, step.strip_prefix("f:")) {
            (Value::Object(m), Some(f)) => m.get_mut(f),
            (Value::Array(a), None) => {
                let step = Step::parse(step);
                a.iter_mut().find(|e| step.matches(e))
            }
            _ => None,
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    match (cur, last.strip_prefix("f:")) {
        (Value::Object(m), Some(f)) => {
            m.remove(f);
        }
        (Value::Array(a), None) => {
            let step = Step::parse(last);
            a.retain(|e| !step.matches(e))
        }
        _ => {}
    }
}

/// Merges an applied configuration into the live object with apply's list semantics.
pub fn merge_applied(live: &mut Value, applied: &Value, dotted: &str, types: &dyn ListTypes) {
    match (live, applied) {
        (Value::Object(l), Value::Object(a)) if dotted.is_empty() || !types.atomic_map(dotted) => {
            for (k, av) in a {
                let child = join(dotted, k);
                match l.get_mut(k) {
                    Some(lv) if !av.is_null() => merge_applied(lv, av, &child, types),
                    _ => {
                        l.insert(k.clone(), av.clone());
                    }
                }
            }
        }
        (Value::Array(l), Value::Array(a)) => match types.list_type(dotted) {
            ListType::Atomic => *l = a.clone(),
            ListType::Set => {
                for e in a {
                    if !l.contains(e) {
                        l.push(e.clone());
                    }
                }
            }
            ListType::Map(keys) => {
                for e in a {
                    let id = key_of(e, &keys);
                    match l.iter_mut().find(|x| key_of(x, &keys) == id) {
                        Some(x) => merge_applied(x, e, dotted, types),
                        None => l.push(e.clone()),
                    }
                }
            }
        },
        (live, applied) => *live = applied.clone(),
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagedEntry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    pub time: String,
    pub subresource: String,
    pub fields: FieldSet,
}

fn encode(fields: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut cur = &mut root;
        for (i, step) in path.iter().enumerate() {
            let entry = cur
                .entry(step.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(m) = entry else { break };
            if i + 1 == path.len() && !step.starts_with("f:") {
                m.entry(".".to_string()).or_insert_with(|| json!({}));
            }
            cur = m;
        }
    }
    Value::Object(root)
}

fn decode(v: &Value, prefix: &mut FieldPath, out: &mut FieldSet) {
    let Value::Object(m) = v else { return };
    if m.is_empty() {
        out.insert(prefix.clone());
        return;
    }
    for (k, c) in m {
        if k == "." {
            out.insert(prefix.clone());
            continue;
        }
        prefix.push(k.clone());
        decode(c, prefix, out);
        prefix.pop();
    }
}

/// Reads `metadata.managedFields`.
pub fn read_managed(obj: &Value) -> Vec<ManagedEntry> {
    let Some(Value::Array(items)) = obj.pointer("/metadata/managedFields") else {
        return vec![];
    };
    items
        .iter()
        .map(|e| {
            let s = |k: &str| {
                e.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let mut fields = FieldSet::new();
            if let Some(f) = e.get("fieldsV1") {
                decode(f, &mut vec![], &mut fields);
            }
            ManagedEntry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields,
            }
        })
        .collect()
}

/// Writes `metadata.managedFields`, dropping entries that own nothing.
pub fn write_managed(obj: &mut Value, entries: &[ManagedEntry]) {
    let items: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if !e.subresource.is_empty() {
                v["subresource"] = json!(e.subresource);
            }
            v
        })
        .collect();
    if items.is_empty() {
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.remove("managedFields");
        }
        return;
    }
    if !obj.get("metadata").is_some_and(Value::is_object) {
        obj["metadata"] = json!({});
    }
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.insert("managedFields".into(), Value::Array(items));
    }
}

/// Renders a field path the way kube-apiserver prints it in conflict messages (`.spec.color`).
/// A path as structured-merge-diff prints it: `.spec.ports[name="http",port=80].protocol`,
/// set members as `[="x"]`.
pub fn display_path(path: &[String]) -> String {
    path.iter()
        .map(|s| {
            if let Some(f) = s.strip_prefix("f:") {
                format!(".{f}")
            } else if let Some(k) = s.strip_prefix("k:") {
                match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(keys)) => format!(
                        "[{}]",
                        keys.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                    _ => format!("[{k}]"),
                }
            } else {
                format!("[={}]", s.get(2..).unwrap_or_default())
            }
        })
        .collect()
}

/// A field owned by another manager with a different value.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    pub manager: String,
    pub operation: String,
    pub subresource: String,
    pub api_version: String,
    pub path: FieldPath,
}

impl Conflict {
    /// kube's `printManager`: the name, its subresource, and `using <apiVersion>` only for an
    /// Update manager (an applier's version is not part of its identity).
    pub fn manager_display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// kube's apply conflict message: one line for one conflict, else grouped per manager in
/// sorted order.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager_display(),
            display_path(&c.path)
        );
    }
    let mut by_manager: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for c in conflicts {
        by_manager
            .entry(c.manager_display())
            .or_default()
            .push(display_path(&c.path));
    }
    let lines: Vec<String> = by_manager
        .into_iter()
        .flat_map(|(m, paths)| {
            std::iter::once(format!("conflicts with {m}:"))
                .chain(paths.into_iter().map(|p| format!("- {p}")))
        })
        .collect();
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Who is applying, and where.
pub struct Applier<'a> {
    pub manager: &'a str,
    pub api_version: &'a str,
    pub subresource: &'a str,
    pub force: bool,
    pub now: &'a str,
}

/// Applies `applied` onto `live` (an empty object when creating). Returns the new object with
/// updated `managedFields`, or the conflicts when `force` is off.
pub fn apply(
    live: &Value,
    applied: &Value,
    who: &Applier,
    types: &dyn ListTypes,
) -> Result<Value, Vec<Conflict>> {
    let mut entries = read_managed(live);
    let mine = fields_of(applied, types);
    let mut conflicts = vec![];
    for e in entries.iter_mut() {
        if e.manager == who.manager && e.operation == "Apply" && e.subresource == who.subresource {
            continue;
        }
        let contested: Vec<FieldPath> = e
            .fields
            .intersection(&mine)
            .filter(|p| {
                let last = p.last().map(String::as_str).unwrap_or("");
                !last.starts_with("k:")
                    && !last.starts_with("v:")
                    && get(live, p) != get(applied, p)
            })
            .cloned()
            .collect();
        if who.force {
            for p in &contested {
                e.fields.remove(p);
            }
        } else {
            conflicts.extend(contested.into_iter().map(|path| Conflict {
                manager: e.manager.clone(),
                operation: e.operation.clone(),
                subresource: e.subresource.clone(),
                api_version: e.api_version.clone(),
                path,
            }));
        }
    }
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut out = live.clone();
    let pos = entries.iter().position(|e| {
        e.manager == who.manager && e.operation == "Apply" && e.subresource == who.subresource
    });
    if let Some(i) = pos {
        let dropped: Vec<FieldPath> = entries[i].fields.difference(&mine).cloned().collect();
        for p in dropped {
            let shared = entries
                .iter()
                .enumerate()
                .any(|(j, e)| j != i && e.fields.iter().any(|q| q.starts_with(&p)));
            if !shared {
                remove(&mut out, &p);
            }
        }
    }
    let mut body = applied.clone();
    if let Some(Value::Object(meta)) = body.get_mut("metadata") {
        for k in UNOWNED_META {
            meta.remove(*k);
        }
    }
    merge_applied(&mut out, &body, "", types);
    match pos {
        // Re-applying the same fields keeps the entry as it was, so an idempotent apply is a
        // no-op write (no new resourceVersion, no watch event) as long as the values match.
        Some(i) if entries[i].fields == mine => {}
        Some(i) => {
            entries[i].fields = mine;
            entries[i].time = who.now.to_string();
            entries[i].api_version = who.api_version.to_string();
        }
        None => entries.push(ManagedEntry {
            manager: who.manager.to_string(),
            operation: "Apply".into(),
            api_version: who.api_version.to_string(),
            time: who.now.to_string(),
            subresource: who.subresource.to_string(),
            fields: mine,
        }),
    }
    write_managed(&mut out, &entries);
    Ok(out)
}

/// Records a non-apply write: the fields it changed move to `manager`'s Update entry.
pub fn record_update(old: Option<&Value>, new: &mut Value, who: &Applier, types: &dyn ListTypes) {
    let mut entries = old.map(read_managed).unwrap_or_default();
    let (after, changed) = match old {
        None => {
            let after = fields_of(new, types);
            (after.clone(), after)
        }
        Some(o) => fields_and_changes(o, new, types),
    };
    for e in entries.iter_mut() {
        e.fields.retain(|p| after.contains(p));
        if !(e.manager == who.manager
            && e.operation == "Update"
            && e.subresource == who.subresource)
        {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| {
            e.manager == who.manager && e.operation == "Update" && e.subresource == who.subresource
        }) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = who.now.to_string();
                e.api_version = who.api_version.to_string();
            }
            None => entries.push(ManagedEntry {
                manager: who.manager.to_string(),
                operation: "Update".into(),
                api_version: who.api_version.to_string(),
                time: who.now.to_string(),
                subresource: who.subresource.to_string(),
                fields: changed,
            }),
        }
    }
    write_managed(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atomic(_: &str) -> ListType {
        ListType::Atomic
    }

    fn who(m: &str, force: bool) -> Applier<'_> {
        Applier {
            manager: m,
            api_version: "example.com/v1",
            subresource: "",
            force,
            now: "2026-01-01T00:00:00Z",
        }
    }

    #[test]
    fn removal_and_ownership() {
        let a1 = json!({"metadata":{"name":"w"},"spec":{"color":"red","size":"S"}});
        let o1 = apply(
            &json!({"metadata":{"name":"w"}}),
            &a1,
            &who("m", false),
            &atomic,
        )
        .unwrap();
        assert_eq!(o1["spec"], json!({"color":"red","size":"S"}));
        let o2 = apply(
            &o1,
            &json!({"metadata":{"name":"w"},"spec":{"other":1}}),
            &who("m2", false),
            &atomic,
        )
        .unwrap();
        let o3 = apply(
            &o2,
            &json!({"metadata":{"name":"w"},"spec":{"color":"red"}}),
            &who("m", false),
            &atomic,
        )
        .unwrap();
        assert_eq!(o3["spec"], json!({"color":"red","other":1}));
        let err = apply(
            &o3,
            &json!({"spec":{"color":"blue"}}),
            &who("m2", false),
            &atomic,
        )
        .unwrap_err();
        assert_eq!(display_path(&err[0].path), ".spec.color");
        assert_eq!(err[0].manager, "m");
        let o4 = apply(
            &o3,
            &json!({"spec":{"color":"blue","other":1}}),
            &who("m2", true),
            &atomic,
        )
        .unwrap();
        assert_eq!(o4["spec"]["color"], "blue");
        // m no longer owns color, so dropping it from m's config does not remove it.
        let o5 = apply(&o4, &json!({"spec":{}}), &who("m", false), &atomic).unwrap();
        assert_eq!(o5["spec"]["color"], "blue");
    }

    #[test]
    fn map_lists_merge_by_key_and_roundtrip_fields() {
        let types = |p: &str| {
            if p == "spec.items" {
                ListType::Map(vec!["name".into()])
            } else {
                ListType::Atomic
            }
        };
        let live = json!({"spec":{"items":[{"name":"a","v":1}]}});
        let out = apply(
            &live,
            &json!({"spec":{"items":[{"name":"b","v":2}]}}),
            &who("m", false),
            &types,
        )
        .unwrap();
        assert_eq!(
            out["spec"]["items"],
            json!([{"name":"a","v":1},{"name":"b","v":2}])
        );
        let back = read_managed(&out);
        assert_eq!(
            back[0].fields,
            fields_of(&json!({"spec":{"items":[{"name":"b","v":2}]}}), &types)
        );
    }

    /// The one walk of both objects finds the fields and changes that looking each field of
    /// the new object up in both from the top finds: through keyed lists (an element changed,
    /// added, removed, or with a duplicate key), set lists, atomic lists, and metadata.
    #[test]
    fn one_walk_finds_what_lookups_from_the_top_find() {
        let types = |p: &str| match p {
            "status.conditions" => ListType::Map(vec!["type".into()]),
            "metadata.finalizers" => ListType::Set,
            _ => ListType::Atomic,
        };
        let cond = |t: &str, s: &str, m: &str| json!({"type": t, "status": s, "message": m});
        let old = json!({
            "apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "m", "resourceVersion": "1", "labels": {"a": "1", "b": "2"},
                         "finalizers": ["f1", "f2"]},
            "spec": {"ports": [1, 2], "nested": {"x": {"y": 1}}, "empty": {}},
            "status": {"phase": "Pending", "conditions": [
                cond("Ready", "False", "waiting"), cond("Paused", "False", ""),
                cond("Gone", "True", ""), cond("Twice", "True", "first"),
                cond("Twice", "False", "second")]},
        });
        let new = json!({
            "apiVersion": "x/v1", "kind": "K",
            "metadata": {"name": "m", "resourceVersion": "2", "labels": {"a": "1", "c": "3"},
                         "finalizers": ["f2", "f3"]},
            "spec": {"ports": [1, 3], "nested": {"x": {"y": 1, "z": 2}}, "empty": {}},
            "status": {"phase": "Running", "conditions": [
                cond("Ready", "True", ""), cond("Paused", "False", ""),
                cond("New", "True", "hello"), cond("Twice", "True", "first")]},
        });
        for (before, after) in [(&old, &new), (&new, &old), (&old, &old)] {
            let listed = fields_of(after, &types);
            let looked_up: FieldSet = listed
                .iter()
                .filter(|p| get(before, p) != get(after, p))
                .cloned()
                .collect();
            let (fields, changed) = fields_and_changes(before, after, &types);
            assert_eq!(fields, listed);
            assert_eq!(changed, looked_up);
        }
        let (_, changed) = fields_and_changes(&old, &new, &types);
        assert!(changed.contains(&vec![
            "f:status".to_string(),
            "f:conditions".to_string(),
            r#"k:{"type":"Ready"}"#.to_string(),
            "f:status".to_string(),
        ]));
        assert!(
            !changed
                .iter()
                .any(|p| p.iter().any(|s| s.contains("Paused")))
        );
    }

    #[test]
    fn updates_take_ownership_of_changed_fields() {
        let o1 = apply(
            &json!({}),
            &json!({"spec":{"color":"red"}}),
            &who("m", false),
            &atomic,
        )
        .unwrap();
        let mut o2 = o1.clone();
        o2["spec"]["color"] = json!("green");
        record_update(Some(&o1), &mut o2, &who("kubectl-edit", false), &atomic);
        let managers: Vec<_> = read_managed(&o2)
            .into_iter()
            .map(|e| (e.manager, e.operation))
            .collect();
        assert_eq!(
            managers,
            vec![("kubectl-edit".to_string(), "Update".to_string())]
        );
    }
}
