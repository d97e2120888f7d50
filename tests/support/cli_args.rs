//! The operator CLI's words for one rate-limit counter, for the CLI's own tests and the e2e
//! tests: both drive `tollgate limits show|reset` often, and an argument spelled out in full
//! each time hides the one word a test changes.

/// `limits <action> --function <function> --layer <layer> [--key <key>]`.
pub fn limits<'a>(
    action: &'a str,
    function: &'a str,
    layer: &'a str,
    key: Option<&'a str>,
) -> Vec<&'a str> {
    let mut args = vec!["limits", action, "--function", function, "--layer", layer];
    if let Some(key) = key {
        args.extend(["--key", key]);
    }
    args
}
