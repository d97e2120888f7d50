//! `template.yaml` as data: CloudFormation's short-form tags (`!Ref X`, `!GetAtt X.Arn`,
//! `!Sub ...`) are rewritten into their long forms (`{Ref: X}`, `{Fn::GetAtt: [X, Arn]}`,
//! `{Fn::Sub: ...}`) so the checks see one shape whichever form the template uses.

use std::collections::BTreeSet;

use serde_norway::{Mapping, Value};

use crate::deploy::tools::template_path;

/// The parsed template, short forms expanded.
pub struct Template {
    root: Value,
}

impl Template {
    pub fn load() -> Self {
        Self::load_from(&template_path())
    }

    /// Another template (an example's).
    pub fn load_from(path: &std::path::Path) -> Self {
        let text = std::fs::read_to_string(path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let root: Value = serde_norway::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
        Template {
            root: long_form(root),
        }
    }

    /// Logical id → resource.
    pub fn resources(&self) -> &Mapping {
        self.root
            .get("Resources")
            .and_then(Value::as_mapping)
            .expect("template has a Resources mapping")
    }

    pub fn resource(&self, id: &str) -> &Value {
        self.resources()
            .get(id)
            .unwrap_or_else(|| panic!("template has no resource `{id}`"))
    }

    /// Logical ids of the resources of one type, e.g. `AWS::DynamoDB::Table`.
    pub fn ids_of_type(&self, ty: &str) -> BTreeSet<String> {
        self.resources()
            .iter()
            .filter(|(_, r)| r.get("Type").and_then(Value::as_str) == Some(ty))
            .map(|(id, _)| id.as_str().expect("logical ids are strings").to_string())
            .collect()
    }

    /// `Globals`, or null.
    pub fn globals(&self) -> &Value {
        self.root.get("Globals").unwrap_or(&Value::Null)
    }

    /// The declaration of output `name` (Description, Value, Condition).
    pub fn output(&self, name: &str) -> &Value {
        self.root
            .get("Outputs")
            .and_then(|o| o.get(name))
            .unwrap_or_else(|| panic!("template has no output `{name}`"))
    }

    /// The declaration of template parameter `name` (Type, Default, AllowedPattern, ...).
    pub fn parameter(&self, name: &str) -> &Value {
        self.root
            .get("Parameters")
            .and_then(|p| p.get(name))
            .unwrap_or_else(|| panic!("template has no parameter `{name}`"))
    }
}

/// The value at `path` (mapping keys) below `value`; panics naming the first key missing, so a
/// failing check says where it looked.
pub fn at<'a>(value: &'a Value, path: &[&str]) -> &'a Value {
    let mut here = value;
    for (i, key) in path.iter().enumerate() {
        here = here
            .get(*key)
            .unwrap_or_else(|| panic!("no `{}` in {value:?}", path[..=i].join(".")));
    }
    here
}

/// `value` as a string; panics with `what` otherwise.
pub fn str_of<'a>(value: &'a Value, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} is a plain string, got {value:?}"))
}

/// The logical id in `{Ref: X}`, if `value` is exactly that.
pub fn ref_to(value: &Value) -> Option<&str> {
    let map = value.as_mapping()?;
    if map.len() != 1 {
        return None;
    }
    map.get("Ref")?.as_str()
}

/// The string of `{Fn::Sub: "..."}`, if `value` is exactly that (the one-argument form).
pub fn sub_string(value: &Value) -> Option<&str> {
    let map = value.as_mapping()?;
    if map.len() != 1 {
        return None;
    }
    map.get("Fn::Sub")?.as_str()
}

/// The resource of the first `Fn::GetAtt` anywhere in `value` (depth first), e.g.
/// `TransferFunctionUrl` in `!Select [2, !Split ["/", !GetAtt TransferFunctionUrl.FunctionUrl]]`.
pub fn get_att_resource(value: &Value) -> Option<&str> {
    match value {
        Value::Mapping(map) => {
            if let Some(Value::Sequence(args)) = map.get("Fn::GetAtt") {
                return args.first().and_then(Value::as_str);
            }
            map.values().find_map(get_att_resource)
        }
        Value::Sequence(items) => items.iter().find_map(get_att_resource),
        _ => None,
    }
}

/// Rewrites `!Name value` into `{Fn::Name: value}` (`{Ref: value}` for `!Ref`, with
/// `!GetAtt A.B` split into `[A, B]`), recursively.
fn long_form(value: Value) -> Value {
    match value {
        Value::Tagged(tagged) => {
            let name = tagged.tag.to_string().trim_start_matches('!').to_string();
            let inner = long_form(tagged.value);
            let (key, inner) = match name.as_str() {
                "Ref" | "Condition" => (name, inner),
                "GetAtt" => {
                    let inner = match inner {
                        Value::String(s) => match s.split_once('.') {
                            Some((resource, attribute)) => Value::Sequence(vec![
                                Value::String(resource.to_string()),
                                Value::String(attribute.to_string()),
                            ]),
                            None => Value::String(s),
                        },
                        other => other,
                    };
                    ("Fn::GetAtt".to_string(), inner)
                }
                _ => (format!("Fn::{name}"), inner),
            };
            let mut map = Mapping::new();
            map.insert(Value::String(key), inner);
            Value::Mapping(map)
        }
        Value::Sequence(items) => Value::Sequence(items.into_iter().map(long_form).collect()),
        Value::Mapping(map) => Value::Mapping(
            map.into_iter()
                .map(|(k, v)| (long_form(k), long_form(v)))
                .collect(),
        ),
        other => other,
    }
}

/// Every string anywhere in `value`, keys included.
pub fn strings(value: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    collect_strings(value, &mut out);
    out
}

fn collect_strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Sequence(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Mapping(map) => map.iter().for_each(|(k, v)| {
            collect_strings(k, out);
            collect_strings(v, out);
        }),
        Value::Tagged(tagged) => collect_strings(&tagged.value, out),
        _ => {}
    }
}

/// `Action`/`Resource` style fields: one string or a list of them; anything else (an
/// intrinsic) is returned as is, for the caller to inspect.
pub fn one_or_many(value: &Value) -> Vec<&Value> {
    match value {
        Value::Sequence(items) => items.iter().collect(),
        other => vec![other],
    }
}

/// The logical id in `{Fn::GetAtt: [X, Arn]}`, if `value` is exactly that.
pub fn get_att_arn(value: &Value) -> Option<&str> {
    let map = value.as_mapping()?;
    if map.len() != 1 {
        return None;
    }
    let args = map.get("Fn::GetAtt")?.as_sequence()?;
    match args.as_slice() {
        [Value::String(id), Value::String(attr)] if attr == "Arn" => Some(id),
        _ => None,
    }
}
