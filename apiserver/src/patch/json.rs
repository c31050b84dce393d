//! RFC 6902 JSON patch with kube-apiserver's (evanphx/json-patch) `test` rule: testing a missing
//! member against `null` succeeds. kube-runtime's finalizer helper depends on that rule, which the
//! `json-patch` crate does not implement.

use super::PatchError;
use serde_json::Value;

/// kube-apiserver's cap on operations per patch.
pub const MAX_OPERATIONS: usize = 10_000;

fn parse_pointer(path: &str) -> Result<Vec<String>, PatchError> {
    if path.is_empty() {
        return Ok(vec![]);
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(PatchError::Malformed(format!(
            "invalid JSON pointer {path:?}: must start with '/'"
        )));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, tokens: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(index(t, a.len(), false).ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

fn get_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for t in tokens {
        cur = match cur {
            Value::Object(m) => m.get_mut(t)?,
            Value::Array(a) => {
                let i = index(t, a.len(), false).ok()?;
                a.get_mut(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn index(token: &str, len: usize, for_add: bool) -> Result<usize, PatchError> {
    if for_add && token == "-" {
        return Ok(len);
    }
    let bad = || PatchError::Failed(format!("invalid array index {token:?}"));
    if token.starts_with('+') || (token.len() > 1 && token.starts_with('0')) {
        return Err(bad());
    }
    let i: usize = token.parse().map_err(|_| bad())?;
    let limit = if for_add { len } else { len.saturating_sub(1) };
    if i > limit || (!for_add && len == 0) {
        return Err(PatchError::Failed(format!(
            "array index {i} out of bounds (length {len})"
        )));
    }
    Ok(i)
}

fn split_last(path: &str) -> Result<(Vec<String>, String), PatchError> {
    let mut tokens = parse_pointer(path)?;
    match tokens.pop() {
        Some(last) => Ok((tokens, last)),
        None => Err(PatchError::Failed(
            "the root of the document cannot be the target here".into(),
        )),
    }
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), PatchError> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = split_last(path)?;
    let missing = || {
        PatchError::Failed(format!(
            "add operation does not apply: doc is missing path: {path:?}"
        ))
    };
    match get_mut(doc, &parent).ok_or_else(missing)? {
        Value::Object(m) => {
            m.insert(last, value);
        }
        Value::Array(a) => {
            let i = index(&last, a.len(), true)?;
            a.insert(i, value);
        }
        _ => return Err(missing()),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, PatchError> {
    let (parent, last) = split_last(path)?;
    let missing = || {
        PatchError::Failed(format!(
            "remove operation does not apply: doc is missing path: {path:?}"
        ))
    };
    match get_mut(doc, &parent).ok_or_else(missing)? {
        Value::Object(m) => m.remove(&last).ok_or_else(missing),
        Value::Array(a) => {
            let i = index(&last, a.len(), false).map_err(|_| missing())?;
            Ok(a.remove(i))
        }
        _ => Err(missing()),
    }
}

fn field<'a>(op: &'a Value, name: &str, i: usize) -> Result<&'a Value, PatchError> {
    op.get(name)
        .ok_or_else(|| PatchError::Malformed(format!("operation {i} is missing {name:?}")))
}

fn str_field<'a>(op: &'a Value, name: &str, i: usize) -> Result<&'a str, PatchError> {
    field(op, name, i)?
        .as_str()
        .ok_or_else(|| PatchError::Malformed(format!("operation {i}: {name:?} must be a string")))
}

/// Parses the patch document and checks its shape without applying it.
pub fn parse(body: &[u8]) -> Result<Vec<Value>, PatchError> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| PatchError::Malformed(format!("error decoding JSON patch: {e}")))?;
    let Value::Array(ops) = v else {
        return Err(PatchError::Malformed(
            "a JSON patch must be a JSON array of operations".into(),
        ));
    };
    if ops.len() > MAX_OPERATIONS {
        return Err(PatchError::TooManyOperations(ops.len()));
    }
    Ok(ops)
}

/// Applies the operations in order; the document is left unchanged on error by working on a copy.
pub fn apply(doc: &Value, ops: &[Value]) -> Result<Value, PatchError> {
    let mut out = doc.clone();
    for (i, op) in ops.iter().enumerate() {
        let path = str_field(op, "path", i)?;
        match str_field(op, "op", i)? {
            "add" => add(&mut out, path, field(op, "value", i)?.clone())?,
            "remove" => {
                remove(&mut out, path)?;
            }
            "replace" => {
                let value = field(op, "value", i)?.clone();
                let target = get_mut(&mut out, &parse_pointer(path)?).ok_or_else(|| {
                    PatchError::Failed(format!(
                        "replace operation does not apply: doc is missing key: {path}"
                    ))
                })?;
                *target = value;
            }
            "move" => {
                let from = str_field(op, "from", i)?;
                if path.starts_with(&format!("{from}/")) {
                    return Err(PatchError::Failed(format!(
                        "cannot move {from:?} into its own child {path:?}"
                    )));
                }
                let v = remove(&mut out, from)?;
                add(&mut out, path, v)?;
            }
            "copy" => {
                let from = str_field(op, "from", i)?;
                let v = get(&out, &parse_pointer(from)?).cloned().ok_or_else(|| {
                    PatchError::Failed(format!(
                        "copy operation does not apply: doc is missing from path: {from}"
                    ))
                })?;
                add(&mut out, path, v)?;
            }
            "test" => {
                let want = field(op, "value", i)?;
                let found = get(&out, &parse_pointer(path)?);
                let ok = match found {
                    None => want.is_null(),
                    Some(v) => v == want,
                };
                if !ok {
                    return Err(PatchError::Failed(format!(
                        "testing value {path} failed: test operation for path {path:?} failed, expected {want}, found {}",
                        found
                            .map(|v| v.to_string())
                            .unwrap_or_else(|| "nothing".into())
                    )));
                }
            }
            other => {
                return Err(PatchError::Malformed(format!(
                    "operation {i}: unknown op {other:?}"
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, ops: Value) -> Result<Value, PatchError> {
        apply(&doc, &parse(ops.to_string().as_bytes())?)
    }

    #[test]
    fn test_missing_equals_null() {
        let ops = json!([
            {"op":"test","path":"/metadata/finalizers","value":null},
            {"op":"add","path":"/metadata/finalizers","value":["f"]}
        ]);
        let out = run(json!({"metadata":{}}), ops.clone()).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["f"]));
        assert!(matches!(run(out, ops), Err(PatchError::Failed(_))));
    }

    #[test]
    fn rfc6902_vectors() {
        let doc = json!({"foo":["bar","baz"],"a":{"b":1}});
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op":"add","path":"/foo/1","value":"q"}])
            )
            .unwrap()["foo"],
            json!(["bar", "q", "baz"])
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op":"add","path":"/foo/-","value":"q"}])
            )
            .unwrap()["foo"],
            json!(["bar", "baz", "q"])
        );
        assert_eq!(
            run(doc.clone(), json!([{"op":"remove","path":"/foo/0"}])).unwrap()["foo"],
            json!(["baz"])
        );
        assert_eq!(
            run(
                doc.clone(),
                json!([{"op":"replace","path":"/a/b","value":2}])
            )
            .unwrap()["a"]["b"],
            2
        );
        let moved = run(
            doc.clone(),
            json!([{"op":"move","from":"/a/b","path":"/c"}]),
        )
        .unwrap();
        assert_eq!(moved["c"], 1);
        assert!(moved["a"].get("b").is_none());
        assert_eq!(
            run(doc.clone(), json!([{"op":"copy","from":"/a","path":"/d"}])).unwrap()["d"],
            json!({"b":1})
        );
        assert!(run(doc.clone(), json!([{"op":"remove","path":"/nope"}])).is_err());
        assert!(run(doc.clone(), json!([{"op":"add","path":"/foo/5","value":1}])).is_err());
        assert!(run(doc.clone(), json!([{"op":"replace","path":"/x","value":1}])).is_err());
        assert_eq!(
            run(
                json!({"a~b":{"c/d":1}}),
                json!([{"op":"test","path":"/a~0b/c~1d","value":1}])
            )
            .unwrap()["a~b"]["c/d"],
            1
        );
    }

    #[test]
    fn shape_errors() {
        assert!(matches!(parse(b"{}"), Err(PatchError::Malformed(_))));
        assert!(matches!(
            parse(b"[{\"op\":\"bogus\",\"path\":\"/a\"}]").map(|o| apply(&json!({}), &o)),
            Ok(Err(PatchError::Malformed(_)))
        ));
        let many = Value::Array(vec![
            json!({"op":"test","path":"","value":null});
            MAX_OPERATIONS + 1
        ]);
        assert_eq!(
            parse(many.to_string().as_bytes()),
            Err(PatchError::TooManyOperations(MAX_OPERATIONS + 1))
        );
    }
}
