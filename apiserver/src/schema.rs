//! Structural OpenAPI v3 schemas of CustomResourceDefinitions: the structural check at CRD
//! write time, and pruning, null-dropping, defaulting and validation of custom resources in
//! the order kube-apiserver applies them. Messages and field paths follow kube-apiserver so
//! users see `spec.replicas: Invalid value: 11: ...` as they would on a real cluster.

mod formats;
mod rules;

use crate::patch::apply::ListType;
use crate::status::Cause;
use serde_json::Value;

/// ObjectMeta fields kept on custom resources; anything else under `metadata` is dropped.
pub const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

fn flag(s: &Value, k: &str) -> bool {
    s.get(k).and_then(Value::as_bool).unwrap_or(false)
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// Checks that a CRD version schema is structural; returns the violations as causes whose
/// field paths point into the CRD (`spec.versions[i].schema.openAPIV3Schema...`).
pub fn check_structural(schema: &Value, path: &str) -> Vec<Cause> {
    let mut out = vec![];
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push(Cause::new(
            "FieldValueRequired",
            join(path, "type"),
            "Required value: must be object at the root",
        ));
    }
    if let Some(meta) = schema
        .pointer("/properties/metadata/properties")
        .and_then(Value::as_object)
    {
        for k in meta.keys() {
            if k != "name" && k != "generateName" {
                out.push(Cause::new(
                    "FieldValueForbidden",
                    join(path, &format!("properties[metadata].properties[{k}]")),
                    "Forbidden: only name and generateName may be specified at the root metadata",
                ));
            }
        }
    }
    out.extend(check_value_schema(schema, path));
    out
}

/// The structural rules below a CRD's root (every node typed, no metadata rules), and its CEL
/// rules' checks: what a schema for one value, such as a ClusterClass variable's, must pass.
pub fn check_value_schema(schema: &Value, path: &str) -> Vec<Cause> {
    let mut out = vec![];
    check_node(schema, path, &mut out);
    rules::check(schema, path, &mut out);
    out
}

fn check_node(s: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(obj) = s.as_object() else {
        out.push(Cause::new(
            "FieldValueInvalid",
            path,
            "Invalid value: a schema must be an object",
        ));
        return;
    };
    let free =
        flag(s, "x-kubernetes-preserve-unknown-fields") || flag(s, "x-kubernetes-int-or-string");
    match obj.get("type").and_then(Value::as_str) {
        Some("object" | "array" | "string" | "integer" | "number" | "boolean") => {}
        Some(t) => out.push(Cause::new(
            "FieldValueNotSupported",
            join(path, "type"),
            format!("Unsupported value: {t:?}: supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""),
        )),
        None if free => {}
        None => out.push(Cause::new(
            "FieldValueRequired",
            join(path, "type"),
            "Required value: must not be empty for specified object fields",
        )),
    }
    if obj.contains_key("properties")
        && obj
            .get("additionalProperties")
            .is_some_and(|a| a.is_object())
    {
        out.push(Cause::new(
            "FieldValueForbidden",
            join(path, "additionalProperties"),
            "Forbidden: additionalProperties and properties are mutual exclusive",
        ));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, p) in props {
            check_node(p, &join(path, &format!("properties[{k}]")), out);
        }
    }
    if let Some(items) = obj.get("items") {
        check_node(items, &join(path, "items"), out);
    } else if obj.get("type").and_then(Value::as_str) == Some("array") {
        out.push(Cause::new(
            "FieldValueRequired",
            join(path, "items"),
            "Required value: must be specified",
        ));
    }
    if let Some(ap) = obj.get("additionalProperties").filter(|a| a.is_object()) {
        check_node(ap, &join(path, "additionalProperties"), out);
    }
    if let Some(p) = obj.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(p)
    {
        out.push(Cause::new(
            "FieldValueInvalid",
            join(path, "pattern"),
            format!(
                "Invalid value: {p:?}: must be a valid regular expression, but isn't: {}",
                e.to_string().lines().last().unwrap_or_default().trim()
            ),
        ));
    }
    if let Some(lt) = obj.get("x-kubernetes-list-type").and_then(Value::as_str) {
        if !matches!(lt, "atomic" | "set" | "map") {
            out.push(Cause::new(
                "FieldValueNotSupported",
                join(path, "x-kubernetes-list-type"),
                format!(
                    "Unsupported value: {lt:?}: supported values: \"atomic\", \"set\", \"map\""
                ),
            ));
        }
        if obj.get("type").and_then(Value::as_str) != Some("array") {
            out.push(Cause::new(
                "FieldValueInvalid",
                join(path, "type"),
                format!(
                    "Invalid value: {}: must be array if x-kubernetes-list-type is specified",
                    obj.get("type").map_or("\"\"".to_string(), Value::to_string)
                ),
            ));
        }
        let keys = obj
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .is_some_and(|k| !k.is_empty());
        if lt == "map" && !keys {
            out.push(Cause::new(
                "FieldValueRequired",
                join(path, "x-kubernetes-list-map-keys"),
                "Required value: must not be empty if x-kubernetes-list-type is map",
            ));
        }
    }
    if let Some(mt) = obj.get("x-kubernetes-map-type").and_then(Value::as_str)
        && !matches!(mt, "granular" | "atomic")
    {
        out.push(Cause::new(
            "FieldValueNotSupported",
            join(path, "x-kubernetes-map-type"),
            format!("Unsupported value: {mt:?}: supported values: \"granular\", \"atomic\""),
        ));
    }
    if let Some(d) = obj.get("default") {
        out.extend(validate(d, s, &join(path, "default")));
    }
}

/// Result of coercing a custom resource: the fields dropped because the schema does not know them.
#[derive(Debug, Default)]
pub struct Pruned(pub Vec<String>);

/// Drops unknown fields (recording them), drops `null`s the schema does not allow, and keeps
/// only known ObjectMeta fields at the root and in embedded resources.
pub fn prune(obj: &mut Value, schema: &Value) -> Pruned {
    let mut pruned = Pruned::default();
    prune_node(obj, schema, &FieldPath::Root(""), true, &mut pruned);
    pruned
}

fn prune_node(v: &mut Value, s: &Value, at: &FieldPath<'_>, root: bool, pruned: &mut Pruned) {
    let embedded = root || flag(s, "x-kubernetes-embedded-resource");
    match v {
        Value::Object(m) => {
            if embedded && let Some(Value::Object(meta)) = m.get_mut("metadata") {
                meta.retain(|k, _| {
                    let keep = OBJECT_META_FIELDS.contains(&k.as_str());
                    if !keep {
                        pruned.0.push(join(&join(&at.render(), "metadata"), k));
                    }
                    keep
                });
            }
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties");
            let preserve = flag(s, "x-kubernetes-preserve-unknown-fields")
                || additional == Some(&Value::Bool(true));
            // Removed after the walk, which borrows the map; reported in the walk's order.
            let mut dropped = vec![];
            for (k, child) in m.iter_mut() {
                if embedded && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                let child_schema = props
                    .and_then(|p| p.get(k))
                    .or(additional.filter(|a| a.is_object()));
                match child_schema {
                    Some(cs) if child.is_null() && !flag(cs, "nullable") => dropped.push(k.clone()),
                    Some(cs) => prune_node(child, cs, &FieldPath::Field(at, k), false, pruned),
                    None if preserve => {}
                    None => {
                        pruned.0.push(FieldPath::Field(at, k).render());
                        dropped.push(k.clone());
                    }
                }
            }
            for k in dropped {
                m.remove(&k);
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_node(item, is, &FieldPath::Index(at, i), false, pruned);
                }
            }
        }
        _ => {}
    }
}

/// Whether any schema in `s` declares a `default:` (or a property is named `default`, which
/// only makes the answer conservative).
pub fn has_defaults(s: &Value) -> bool {
    match s {
        Value::Object(m) => m.contains_key("default") || m.values().any(has_defaults),
        Value::Array(items) => items.iter().any(has_defaults),
        _ => false,
    }
}

/// Applies `default:` values to absent properties of objects that exist.
pub fn default(v: &mut Value, s: &Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    if !m.contains_key(k)
                        && let Some(d) = ps.get("default")
                    {
                        m.insert(k.clone(), d.clone());
                    }
                    if let Some(child) = m.get_mut(k) {
                        default(child, ps);
                    }
                }
            }
            if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
                let props = s.get("properties").and_then(Value::as_object);
                for (k, child) in m.iter_mut() {
                    if props.is_none_or(|p| !p.contains_key(k)) {
                        default(child, ap);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items") {
                for item in items {
                    default(item, is);
                }
            }
        }
        _ => {}
    }
}

/// Whether [`default`] would leave `v` as it is: every defaulted property is present. Stored
/// objects were defaulted when written, so this spares copying one only to default it.
pub fn defaulted(v: &Value, s: &Value) -> bool {
    match v {
        Value::Object(m) => {
            let props = s.get("properties").and_then(Value::as_object);
            let declared = props.is_none_or(|props| {
                props.iter().all(|(k, ps)| match m.get(k) {
                    Some(child) => defaulted(child, ps),
                    None => ps.get("default").is_none(),
                })
            });
            declared
                && s.get("additionalProperties")
                    .filter(|a| a.is_object())
                    .is_none_or(|ap| {
                        m.iter()
                            .filter(|(k, _)| props.is_none_or(|p| !p.contains_key(*k)))
                            .all(|(_, child)| defaulted(child, ap))
                    })
        }
        Value::Array(items) => s
            .get("items")
            .is_none_or(|is| items.iter().all(|item| defaulted(item, is))),
        _ => true,
    }
}

/// `v` with its schema defaults, copied only when defaulting changes it.
pub fn with_defaults<'a>(v: &'a Value, s: &Value) -> std::borrow::Cow<'a, Value> {
    if defaulted(v, s) {
        std::borrow::Cow::Borrowed(v)
    } else {
        let mut owned = v.clone();
        default(&mut owned, s);
        std::borrow::Cow::Owned(owned)
    }
}

fn show(v: &Value) -> String {
    match v {
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn invalid(path: &str, v: &Value, why: String) -> Cause {
    Cause::new(
        "FieldValueInvalid",
        path,
        format!("Invalid value: {}: {why}", show(v)),
    )
}

/// Validates `v` against the schema node `s`; `path` is the field path used in messages.
pub fn validate(v: &Value, s: &Value, path: &str) -> Vec<Cause> {
    let mut out = vec![];
    validate_node(v, s, &FieldPath::Root(path), &mut out);
    out
}

/// Where a value is, rendered only for a message: most writes have nothing to report, and
/// formatting every node's path was a third of the schema walk.
enum FieldPath<'a> {
    Root(&'a str),
    Field(&'a FieldPath<'a>, &'a str),
    Index(&'a FieldPath<'a>, usize),
}

impl FieldPath<'_> {
    fn render(&self) -> String {
        match self {
            FieldPath::Root(p) => (*p).to_string(),
            FieldPath::Field(parent, k) => join(&parent.render(), k),
            FieldPath::Index(parent, i) => format!("{}[{i}]", parent.render()),
        }
    }

    /// Whether the path renders as nothing: the body itself.
    fn is_empty(&self) -> bool {
        match self {
            FieldPath::Root(p) => p.is_empty(),
            FieldPath::Field(parent, k) => k.is_empty() && parent.is_empty(),
            FieldPath::Index(..) => false,
        }
    }

    /// The path, and how a message names it (`body` at the root).
    fn both(&self) -> (String, String) {
        let path = self.render();
        let shown = if path.is_empty() {
            "body".to_string()
        } else {
            path.clone()
        };
        (path, shown)
    }
}

fn validate_node(v: &Value, s: &Value, at: &FieldPath<'_>, out: &mut Vec<Cause>) {
    if v.is_null() {
        if !flag(s, "nullable") && !flag(s, "x-kubernetes-preserve-unknown-fields") {
            let (path, shown) = at.both();
            out.push(invalid(
                &path,
                v,
                format!(
                    "{shown} in body must be of type {}",
                    s.get("type").and_then(Value::as_str).unwrap_or("object")
                ),
            ));
        }
        return;
    }
    if flag(s, "x-kubernetes-int-or-string") {
        if !(v.is_string() || type_name(v) == "integer") {
            let (path, shown) = at.both();
            out.push(invalid(
                &path,
                v,
                format!(
                    "{shown} in body must be of type integer or string: {}",
                    show(v)
                ),
            ));
        }
    } else if let Some(t) = s.get("type").and_then(Value::as_str) {
        let actual = type_name(v);
        let ok = actual == t || (t == "number" && actual == "integer");
        if !ok {
            let (path, shown) = at.both();
            out.push(Cause::new(
                "FieldValueTypeInvalid",
                &path,
                format!(
                    "Invalid value: {}: {shown} in body must be of type {t}: \"{actual}\"",
                    show(v)
                ),
            ));
            return;
        }
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.contains(v)
    {
        let list = allowed
            .iter()
            .filter(|a| !a.is_null())
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        out.push(Cause::new(
            "FieldValueNotSupported",
            at.render(),
            format!("Unsupported value: {}: supported values: {list}", show(v)),
        ));
    }
    match v {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
                let excl = flag(s, "exclusiveMaximum");
                if x > max || (excl && x == max) {
                    let rel = if excl {
                        "less than"
                    } else {
                        "less than or equal to"
                    };
                    let (path, shown) = at.both();
                    out.push(invalid(
                        &path,
                        &Value::Number(n.clone()),
                        format!("{shown} in body should be {rel} {}", trim_float(max)),
                    ));
                }
            }
            if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
                let excl = flag(s, "exclusiveMinimum");
                if x < min || (excl && x == min) {
                    let rel = if excl {
                        "greater than"
                    } else {
                        "greater than or equal to"
                    };
                    let (path, shown) = at.both();
                    out.push(invalid(
                        &path,
                        &Value::Number(n.clone()),
                        format!("{shown} in body should be {rel} {}", trim_float(min)),
                    ));
                }
            }
            if s.get("format").and_then(Value::as_str) == Some("int32")
                && (x > i32::MAX as f64 || x < i32::MIN as f64)
            {
                let (path, shown) = at.both();
                out.push(invalid(
                    &path,
                    &Value::Number(n.clone()),
                    format!("{shown} in body must be of format int32"),
                ));
            }
        }
        Value::String(st) => {
            let len = st.chars().count() as u64;
            if let Some(max) = s
                .get("maxLength")
                .and_then(Value::as_u64)
                .filter(|m| len > *m)
            {
                out.push(Cause::new(
                    "FieldValueTooLong",
                    at.render(),
                    format!("Too long: may not be more than {max} bytes"),
                ));
            }
            if let Some(min) = s
                .get("minLength")
                .and_then(Value::as_u64)
                .filter(|m| len < *m)
            {
                let (path, shown) = at.both();
                out.push(invalid(
                    &path,
                    &Value::String(st.clone()),
                    format!("{shown} in body should be at least {min} chars long"),
                ));
            }
            if let Some(p) = s.get("pattern").and_then(Value::as_str) {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(st) => {
                        let (path, shown) = at.both();
                        out.push(invalid(
                            &path,
                            &Value::String(st.clone()),
                            format!("{shown} in body should match '{p}'"),
                        ))
                    }
                    Ok(_) => {}
                    Err(_) => out.push(Cause::new(
                        "FieldValueInvalid",
                        at.render(),
                        format!("Invalid value: the schema pattern {p:?} does not compile"),
                    )),
                }
            }
            if let Some(f) = s.get("format").and_then(Value::as_str)
                && !formats::valid(f, st)
            {
                let (path, shown) = at.both();
                out.push(invalid(
                    &path,
                    &Value::String(st.clone()),
                    format!("{shown} in body must be of type {f}: {st:?}"),
                ));
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(max) = s.get("maxItems").and_then(Value::as_u64).filter(|m| n > *m) {
                out.push(Cause::new(
                    "FieldValueTooMany",
                    at.render(),
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = s.get("minItems").and_then(Value::as_u64).filter(|m| n < *m) {
                let (path, shown) = at.both();
                out.push(invalid(
                    &path,
                    &Value::Array(items.clone()),
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            match list_type(s) {
                ListType::Set => duplicates(items, at, |e| e.to_string(), out),
                ListType::Map(keys) => duplicates(
                    items,
                    at,
                    |e| {
                        keys.iter()
                            .map(|k| e.get(k).cloned().unwrap_or(Value::Null).to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    },
                    out,
                ),
                ListType::Atomic if flag(s, "uniqueItems") => {
                    duplicates(items, at, |e| e.to_string(), out)
                }
                ListType::Atomic => {}
            }
            if let Some(is) = s.get("items") {
                for (i, item) in items.iter().enumerate() {
                    validate_node(item, is, &FieldPath::Index(at, i), out);
                }
            }
        }
        Value::Object(m) => {
            if let Some(Value::Array(req)) = s.get("required") {
                for r in req.iter().filter_map(Value::as_str) {
                    if !m.contains_key(r) {
                        out.push(Cause::new(
                            "FieldValueRequired",
                            join(&at.render(), r),
                            "Required value",
                        ));
                    }
                }
            }
            let n = m.len() as u64;
            if let Some(max) = s
                .get("maxProperties")
                .and_then(Value::as_u64)
                .filter(|x| n > *x)
            {
                out.push(Cause::new(
                    "FieldValueTooMany",
                    at.render(),
                    format!("Too many: {n}: must have at most {max} items"),
                ));
            }
            if let Some(min) = s
                .get("minProperties")
                .and_then(Value::as_u64)
                .filter(|x| n < *x)
            {
                let (path, shown) = at.both();
                out.push(invalid(
                    &path,
                    &Value::Object(m.clone()),
                    format!("{shown} in body should have at least {min} properties"),
                ));
            }
            let props = s.get("properties").and_then(Value::as_object);
            let additional = s.get("additionalProperties").filter(|a| a.is_object());
            let embedded = at.is_empty() || flag(s, "x-kubernetes-embedded-resource");
            for (k, child) in m.iter() {
                if embedded && k == "metadata" {
                    continue;
                }
                if let Some(cs) = props.and_then(|p| p.get(k)).or(additional) {
                    validate_node(child, cs, &FieldPath::Field(at, k), out);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn trim_float(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

fn duplicates(
    items: &[Value],
    at: &FieldPath<'_>,
    key: impl Fn(&Value) -> String,
    out: &mut Vec<Cause>,
) {
    let mut seen = std::collections::HashSet::new();
    for (i, e) in items.iter().enumerate() {
        if !seen.insert(key(e)) {
            out.push(Cause::new(
                "FieldValueDuplicate",
                FieldPath::Index(at, i).render(),
                format!("Duplicate value: {e}"),
            ));
        }
    }
}

/// The value at a field path (`spec.items[0].name`, or a CRD's `.spec.replicas`), if there is
/// one.
pub fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path.split('.').filter(|s| !s.is_empty()) {
        let (name, indexes) = match seg.find('[') {
            Some(i) => (&seg[..i], &seg[i..]),
            None => (seg, ""),
        };
        if !name.is_empty() {
            cur = cur.get(name)?;
        }
        for idx in indexes.split(']').filter(|s| !s.is_empty()) {
            let idx = idx.trim_start_matches('[');
            cur = match idx.parse::<usize>() {
                Ok(i) => cur.get(i)?,
                Err(_) => cur.get(idx)?,
            };
        }
    }
    Some(cur)
}

/// Validation ratcheting (kube ≥ 1.30): an error about a value the update did not change is
/// dropped, so a CRD that tightens a rule does not block edits of other fields. A missing
/// required field belongs to the object that lacks it, so that object is what must be
/// unchanged.
pub fn ratcheted(cause: &Cause, new: &Value, old: &Value) -> bool {
    let path = if cause.reason == "FieldValueRequired" {
        cause.field.rsplit_once('.').map_or("", |(p, _)| p)
    } else {
        cause.field.as_str()
    };
    value_at(new, path) == value_at(old, path)
}

/// kube's CEL error value: the type of the schema node the rule sits on.
fn node_type(schema: &Value, field_path: &str) -> String {
    let dotted: String = field_path
        .split('.')
        .map(|seg| seg.split('[').next().unwrap_or_default())
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(".");
    node_at(schema, &dotted)
        .and_then(|n| n.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_string()
}

/// Evaluates the CEL rules (`x-kubernetes-validations`) of the schema on `obj` and `old`,
/// both already defaulted from it (`default`); `old` enables transition rules (`oldSelf`)
/// and ratcheting on updates.
pub fn validate_cel(
    obj: &Value,
    schema: &Value,
    compiled: &kube_cel::CompiledSchema,
    old: Option<&Value>,
) -> Vec<Cause> {
    match kube_cel::validate_compiled_defaulted(compiled, obj, old) {
        Ok(()) => vec![],
        Err(errors) => errors
            .into_vec()
            .into_iter()
            .filter_map(|e| {
                let reason = e
                    .reason
                    .clone()
                    .unwrap_or_else(|| "FieldValueInvalid".into());
                let message = match reason.as_str() {
                    "FieldValueForbidden" => format!("Forbidden: {}", e.message),
                    "FieldValueRequired" => format!("Required value: {}", e.message),
                    "FieldValueDuplicate" => format!("Duplicate value: {}", e.message),
                    _ => format!(
                        "Invalid value: \"{}\": {}",
                        node_type(schema, &e.field_path),
                        e.message
                    ),
                };
                let cause = Cause::new(&reason, e.field_path.clone(), message);
                // Transition rules compare with oldSelf on purpose; they never ratchet.
                let ratchet = !e.rule.contains("oldSelf")
                    && old.is_some_and(|o| {
                        value_at(obj, &e.field_path) == value_at(o, &e.field_path)
                    });
                (!ratchet).then_some(cause)
            })
            .collect(),
    }
}

/// The error kinds after which kube does not run CEL rules (`hasBlockingErr`).
pub fn blocks_cel(cause: &Cause) -> bool {
    matches!(
        cause.reason.as_str(),
        "FieldValueNotSupported"
            | "FieldValueRequired"
            | "FieldValueTooLong"
            | "FieldValueTooMany"
            | "FieldValueTypeInvalid"
    )
}

/// The cause kube adds when blocking errors kept CEL rules from running.
pub fn cel_not_checked() -> Cause {
    Cause::new(
        "FieldValueInvalid",
        "<nil>",
        "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
    )
}

/// The apply list type declared on a schema node.
pub fn list_type(s: &Value) -> ListType {
    match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => ListType::Set,
        Some("map") => ListType::Map(
            s.get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| {
                    k.iter()
                        .filter_map(Value::as_str)
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        ),
        _ => ListType::Atomic,
    }
}

/// The schema node at a dotted path (`spec.items`), following `properties`, `items` and
/// `additionalProperties`.
pub fn node_at<'a>(schema: &'a Value, dotted: &str) -> Option<&'a Value> {
    let mut cur = schema;
    if dotted.is_empty() {
        return Some(cur);
    }
    for step in dotted.split('.') {
        while cur.get("type").and_then(Value::as_str) == Some("array") {
            cur = cur.get("items")?;
        }
        cur = cur
            .get("properties")
            .and_then(|p| p.get(step))
            .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?;
    }
    Some(cur)
}

/// The dotted paths of the `x-kubernetes-map-type: atomic` nodes of a schema, `*` standing
/// for any key of a map (`additionalProperties`). Computed once per CRD version, so apply's
/// per-field lookups cost nothing for the common schema that has none.
pub fn atomic_map_paths(schema: &Value) -> Vec<String> {
    fn walk(s: &Value, path: &str, out: &mut Vec<String>) {
        let mut s = s;
        while s.get("type").and_then(Value::as_str) == Some("array") {
            match s.get("items") {
                Some(i) => s = i,
                None => return,
            }
        }
        if !path.is_empty()
            && s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
        {
            out.push(path.to_string());
        }
        if let Some(props) = s.get("properties").and_then(Value::as_object) {
            for (k, p) in props {
                walk(p, &join(path, k), out);
            }
        }
        if let Some(ap) = s.get("additionalProperties").filter(|a| a.is_object()) {
            walk(ap, &join(path, "*"), out);
        }
    }
    let mut out = vec![];
    walk(schema, "", &mut out);
    out
}

/// Whether `dotted` is one of `paths` (as made by [`atomic_map_paths`]).
pub fn matches_path(paths: &[String], dotted: &str) -> bool {
    paths.iter().any(|p| {
        let mut want = p.split('.');
        let mut got = dotted.split('.');
        loop {
            match (want.next(), got.next()) {
                (None, None) => return true,
                (Some(w), Some(g)) if w == "*" || w == g => {}
                _ => return false,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn widget_schema() -> Value {
        json!({"type":"object","properties":{
            "spec":{"type":"object","required":["color"],"properties":{
                "color":{"type":"string"},
                "replicas":{"type":"integer","default":1,"maximum":10.0,"minimum":0.0},
                "size":{"type":"string","nullable":true,"enum":["Small","Large",null]},
                "raw":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
                "items":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["name"],
                         "items":{"type":"object","properties":{"name":{"type":"string"}}}}
            }},
            "status":{"type":"object","x-kubernetes-preserve-unknown-fields":true}
        }})
    }

    #[test]
    fn prune_default_validate() {
        let s = widget_schema();
        let mut o = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","bogus":1},
            "spec":{"color":"red","bogus":2,"raw":{"a":{"b":[1]}},"size":null}});
        let pruned = prune(&mut o, &s);
        assert_eq!(
            pruned.0,
            vec!["metadata.bogus".to_string(), "spec.bogus".to_string()]
        );
        default(&mut o, &s);
        assert_eq!(o["spec"]["replicas"], 1);
        assert_eq!(o["spec"]["raw"], json!({"a":{"b":[1]}}));
        assert!(o["spec"]["size"].is_null());
        assert!(validate(&o, &s, "").is_empty());

        let bad = json!({"spec":{"replicas":11,"size":"Huge"}});
        let errs = validate(&bad, &s, "");
        let fields: Vec<_> = errs.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, vec!["spec.color", "spec.replicas", "spec.size"]);
        assert_eq!(
            errs[1].message,
            "Invalid value: 11: spec.replicas in body should be less than or equal to 10"
        );
        assert!(errs[2].message.starts_with("Unsupported value: \"Huge\""));

        let wrong = json!({"spec":{"color":"x","replicas":"x"}});
        assert!(
            validate(&wrong, &s, "")[0]
                .message
                .contains("must be of type integer")
        );
        let dup = json!({"spec":{"color":"x","items":[{"name":"a"},{"name":"a"}]}});
        assert_eq!(validate(&dup, &s, "")[0].reason, "FieldValueDuplicate");
    }

    #[test]
    fn paths_are_rendered_for_what_is_reported() {
        let s = widget_schema();
        let bad = json!({"spec":{"color":"x","items":[{"name":"a"},{"name":1},{"name":"a"}]}});
        let fields: Vec<_> = validate(&bad, &s, "obj")
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(fields, vec!["obj.spec.items[2]", "obj.spec.items[1].name"]);
        let mut o = json!({"spec":{"color":"x","items":[{"name":"a","x":1}],"y":null}});
        assert_eq!(prune(&mut o, &s).0, vec!["spec.items[0].x", "spec.y"]);
        assert_eq!(o, json!({"spec":{"color":"x","items":[{"name":"a"}]}}));
    }

    #[test]
    fn defaults_are_copied_in_only_when_missing() {
        let s = widget_schema();
        let mut o = json!({"spec":{"color":"red","items":[{"name":"a"}]}});
        assert!(!defaulted(&o, &s));
        let copy = with_defaults(&o, &s);
        assert!(matches!(copy, std::borrow::Cow::Owned(_)));
        assert_eq!(copy["spec"]["replicas"], 1);
        default(&mut o, &s);
        assert!(matches!(
            with_defaults(&o, &s),
            std::borrow::Cow::Borrowed(_)
        ));
    }

    #[test]
    fn atomic_maps_are_found_through_lists_and_maps() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "selector": {"type": "object", "x-kubernetes-map-type": "atomic"},
            "pools": {"type": "array", "items": {"type": "object", "properties": {
                "ref": {"type": "object", "x-kubernetes-map-type": "atomic"}}}},
            "byName": {"type": "object", "additionalProperties": {"type": "object",
                "x-kubernetes-map-type": "atomic"}}}}}});
        let paths = atomic_map_paths(&s);
        assert!(matches_path(&paths, "spec.selector"));
        assert!(matches_path(&paths, "spec.pools.ref"));
        assert!(matches_path(&paths, "spec.byName.anything"));
        assert!(!matches_path(&paths, "spec"));
        assert!(!matches_path(&paths, "spec.selector.matchLabels"));
    }

    #[test]
    fn non_nullable_null_is_dropped() {
        let s = widget_schema();
        let mut o = json!({"spec":{"color":null}});
        prune(&mut o, &s);
        assert_eq!(validate(&o, &s, "")[0].field, "spec.color");
    }

    #[test]
    fn structural_check() {
        assert!(check_structural(&widget_schema(), "schema").is_empty());
        let bad =
            json!({"type":"object","properties":{"spec":{"properties":{"a":{"type":"string"}}}}});
        let errs = check_structural(&bad, "s");
        assert_eq!(errs[0].field, "s.properties[spec].type");
        let bad_default =
            json!({"type":"object","properties":{"n":{"type":"integer","default":"x"}}});
        assert_eq!(check_structural(&bad_default, "s").len(), 1);
        assert_eq!(
            node_at(&widget_schema(), "spec.items.name").and_then(|n| n.get("type")),
            Some(&json!("string"))
        );
    }
}
