//! RFC 7386 JSON merge patch: the `json-patch` crate's (one merge for the whole workspace; the
//! provider driver uses it too). The vectors below pin the behaviour the server relies on: a
//! non-object target becomes an object before an object patch merges into it.

pub use json_patch::merge;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rfc7386_vectors() {
        let cases = [
            (json!({"a":"b"}), json!({"a":"c"}), json!({"a":"c"})),
            (json!({"a":"b"}), json!({"b":"c"}), json!({"a":"b","b":"c"})),
            (json!({"a":"b"}), json!({"a":null}), json!({})),
            (json!({"a":["b"]}), json!({"a":"c"}), json!({"a":"c"})),
            (
                json!({"a":{"b":"c"}}),
                json!({"a":{"b":"d","c":null}}),
                json!({"a":{"b":"d"}}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a":"foo"}), json!("bar"), json!("bar")),
            (
                json!({}),
                json!({"a":{"bb":{"ccc":null}}}),
                json!({"a":{"bb":{}}}),
            ),
        ];
        for (mut t, p, want) in cases {
            merge(&mut t, &p);
            assert_eq!(t, want);
        }
    }
}
