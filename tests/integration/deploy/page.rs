//! The browser page behind CloudFront (Frontend=cloudfront): a private bucket that only the
//! distribution reads, every path routed to the page or to the function that serves it, and
//! the security headers with the page's Content-Security-Policy.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;

use serde_norway::Value;

use crate::deploy::template::{
    at, get_att_resource, one_or_many, ref_to, str_of, sub_string, Template,
};
use crate::deploy::tools::repo_root;

const BUCKET: &str = "PageBucket";
const SESSION_URL: &str = "EphemeralKeyFunctionUrl";
const TRANSFER_URL: &str = "TransferFunctionUrl";
const PAGE_HEADERS: &str = "PageResponseHeadersPolicy";
const API_HEADERS: &str = "ApiResponseHeadersPolicy";
const ALL_METHODS: &[&str] = &["DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT"];

#[test]
fn page_bucket_is_private_and_read_only_by_the_distribution() {
    let template = Template::load();

    let bucket = at(template.resource(BUCKET), &["Properties"]);
    let block = at(bucket, &["PublicAccessBlockConfiguration"]);
    for setting in [
        "BlockPublicAcls",
        "BlockPublicPolicy",
        "IgnorePublicAcls",
        "RestrictPublicBuckets",
    ] {
        assert_eq!(
            block.get(setting).and_then(Value::as_bool),
            Some(true),
            "{BUCKET}: {setting} must be on"
        );
    }
    let ownership: Vec<&str> = one_or_many(at(bucket, &["OwnershipControls", "Rules"]))
        .into_iter()
        .map(|rule| str_of(at(rule, &["ObjectOwnership"]), "ObjectOwnership"))
        .collect();
    assert_eq!(ownership, ["BucketOwnerEnforced"], "{BUCKET}: no ACLs");
    let encryption = one_or_many(at(
        bucket,
        &["BucketEncryption", "ServerSideEncryptionConfiguration"],
    ));
    assert!(
        encryption.iter().any(
            |rule| at(rule, &["ServerSideEncryptionByDefault", "SSEAlgorithm"]).as_str()
                == Some("AES256")
        ),
        "{BUCKET}: SSE-S3 by default"
    );
    // A website endpoint is public and cannot sit behind OAC; ACLs are off.
    for key in ["WebsiteConfiguration", "AccessControl"] {
        assert!(bucket.get(key).is_none(), "{BUCKET} sets {key}");
    }

    // The policy: one Allow, GetObject for CloudFront as this distribution; the rest Deny.
    let policy = at(template.resource("PageBucketPolicy"), &["Properties"]);
    assert_eq!(ref_to(at(policy, &["Bucket"])), Some(BUCKET));
    let statements = one_or_many(at(policy, &["PolicyDocument", "Statement"]));
    let (allows, denies): (Vec<&Value>, Vec<&Value>) = statements
        .into_iter()
        .partition(|st| st.get("Effect").and_then(Value::as_str) == Some("Allow"));
    let [allow] = allows.as_slice() else {
        panic!("PageBucketPolicy: exactly one Allow statement, got {allows:?}");
    };
    assert_eq!(
        str_of(at(allow, &["Principal", "Service"]), "Principal.Service"),
        "cloudfront.amazonaws.com"
    );
    assert_eq!(
        at(allow, &["Principal"]).as_mapping().map(|m| m.len()),
        Some(1),
        "only the CloudFront service principal"
    );
    let actions: Vec<&Value> = one_or_many(at(allow, &["Action"]));
    assert_eq!(
        actions,
        [&Value::from("s3:GetObject")],
        "CloudFront only reads objects"
    );
    assert_eq!(
        sub_string(at(allow, &["Resource"])),
        Some("${PageBucket.Arn}/*"),
        "the objects of the page bucket"
    );
    let condition = at(allow, &["Condition"]);
    assert_eq!(
        condition.as_mapping().map(|m| m.len()),
        Some(1),
        "{condition:?}"
    );
    let source = sub_string(at(condition, &["StringEquals", "AWS:SourceArn"]))
        .expect("AWS:SourceArn is a !Sub of the distribution's ARN");
    assert_eq!(
        source, "arn:${AWS::Partition}:cloudfront::${AWS::AccountId}:distribution/${Distribution}",
        "only requests CloudFront makes for this distribution"
    );
    for deny in &denies {
        assert_eq!(deny.get("Effect").and_then(Value::as_str), Some("Deny"));
    }
    let no_tls = denies
        .iter()
        .find(|st| {
            st.get("Condition")
                .and_then(|c| c.get("Bool"))
                .and_then(|b| b.get("aws:SecureTransport"))
                .and_then(Value::as_str)
                == Some("false")
        })
        .expect("PageBucketPolicy denies requests without TLS");
    assert_eq!(no_tls.get("Principal").and_then(Value::as_str), Some("*"));
    assert_eq!(no_tls.get("Action").and_then(Value::as_str), Some("s3:*"));
    let resources: Vec<&Value> = one_or_many(at(no_tls, &["Resource"]));
    assert!(
        resources
            .iter()
            .any(|r| get_att_resource(r) == Some(BUCKET) && sub_string(r).is_none())
            && resources
                .iter()
                .any(|r| sub_string(r) == Some("${PageBucket.Arn}/*")),
        "the TLS deny covers the bucket and its objects: {resources:?}"
    );

    // The distribution reaches the bucket through OAC, signing every request, and sends it
    // nothing of the function origins' (no origin-verify secret).
    let origin = page_origin(&template);
    let oac_id = get_att_resource(at(origin, &["OriginAccessControlId"]))
        .expect("the page origin uses an origin access control");
    let oac = at(
        template.resource(oac_id),
        &["Properties", "OriginAccessControlConfig"],
    );
    for (key, expected) in [
        ("OriginAccessControlOriginType", "s3"),
        ("SigningBehavior", "always"),
        ("SigningProtocol", "sigv4"),
    ] {
        assert_eq!(str_of(at(oac, &[key]), key), expected, "{oac_id}.{key}");
    }
    assert_eq!(
        at(origin, &["S3OriginConfig", "OriginAccessIdentity"]).as_str(),
        Some(""),
        "no legacy origin access identity next to OAC"
    );
    for key in ["OriginCustomHeaders", "CustomOriginConfig"] {
        assert!(origin.get(key).is_none(), "the page origin sets {key}");
    }
}

/// Routing as CloudFront does it (the first matching pattern in order, else the default):
/// every path of `openapi.yaml` under `/api` reaches the function its `servers` name, any other
/// `/api` path reaches ephemeral-key (its problem+json 404, not an S3 403), and the rest is
/// the page.
#[test]
fn every_path_reaches_its_origin() {
    let template = Template::load();
    let config = distribution_config(&template);
    assert_eq!(
        at(config, &["DefaultRootObject"]).as_str(),
        Some("index.html")
    );

    let mut expected: Vec<(String, &str)> = contract_paths()
        .into_iter()
        .map(|(path, url)| (format!("/api{path}"), url))
        .collect();
    assert!(
        expected.len() >= 5,
        "openapi.yaml lists the contract's paths: {expected:?}"
    );
    for unrouted in [
        "/api",
        "/api/",
        "/api/nope",
        "/api/internal",
        "/api/session/x",
    ] {
        expected.push((unrouted.to_string(), SESSION_URL));
    }
    for page in [
        "/",
        "/index.html",
        "/demo.js",
        "/config.js",
        "/config.json",
        "/voice-client.js",
        "/favicon.ico",
    ] {
        expected.push((page.to_string(), BUCKET));
    }

    for (path, target) in expected {
        let behaviour = route(config, &path);
        let origin = str_of(at(behaviour, &["TargetOriginId"]), "TargetOriginId");
        assert_eq!(
            origin_resource(config, origin),
            target,
            "{path} goes to origin `{origin}`"
        );
    }
}

/// Each behaviour has the policies of what it serves: the API's (nothing cached, the
/// contract's headers forwarded, https-only, all methods, the API's security headers) or the
/// page's (read only, compressed, the page's security headers and CSP).
#[test]
fn behaviours_carry_the_policies_of_what_they_serve() {
    let template = Template::load();
    let config = distribution_config(&template);
    let mut seen = BTreeSet::new();
    for (pattern, behaviour) in behaviours(config) {
        let what = pattern.unwrap_or("DefaultCacheBehavior");
        let origin = str_of(at(behaviour, &["TargetOriginId"]), "TargetOriginId");
        let target = origin_resource(config, origin);
        let methods = methods(behaviour);
        let refers = |key: &str| behaviour.get(key).and_then(ref_to);
        if target == BUCKET {
            assert_eq!(
                methods,
                ["GET", "HEAD"].into(),
                "{what}: the page is only read"
            );
            assert_eq!(
                behaviour.get("Compress").and_then(Value::as_bool),
                Some(true),
                "{what}"
            );
            assert_eq!(
                refers("ResponseHeadersPolicyId"),
                Some(PAGE_HEADERS),
                "{what}"
            );
            assert!(
                behaviour.get("OriginRequestPolicyId").is_none(),
                "{what}: nothing of the viewer's request goes to S3"
            );
            assert!(
                refers("CachePolicyId") != Some("ApiCachePolicy"),
                "{what}: the page is cacheable"
            );
        } else {
            assert!(
                [SESSION_URL, TRANSFER_URL].contains(&target),
                "{what}: origin {origin} is neither the page nor a function"
            );
            assert_eq!(
                methods,
                ALL_METHODS.iter().copied().collect(),
                "{what}: the functions answer a wrong method themselves (405)"
            );
            assert_eq!(
                behaviour
                    .get("ViewerProtocolPolicy")
                    .and_then(Value::as_str),
                Some("https-only"),
                "{what}"
            );
            assert_eq!(refers("CachePolicyId"), Some("ApiCachePolicy"), "{what}");
            assert_eq!(
                refers("OriginRequestPolicyId"),
                Some("ApiOriginRequestPolicy"),
                "{what}"
            );
            assert_eq!(
                refers("ResponseHeadersPolicyId"),
                Some(API_HEADERS),
                "{what}"
            );
        }
        seen.insert(target);
    }
    assert_eq!(seen, BTreeSet::from([BUCKET, SESSION_URL, TRANSFER_URL]));

    for policy in [PAGE_HEADERS, API_HEADERS] {
        let config = at(
            template.resource(policy),
            &["Properties", "ResponseHeadersPolicyConfig"],
        );
        assert!(
            config.get("CorsConfig").is_none(),
            "{policy}: CORS is the functions' own (CORS_ALLOWED_ORIGINS), on every front end"
        );
        let security = at(config, &["SecurityHeadersConfig"]);
        let hsts = at(security, &["StrictTransportSecurity"]);
        assert!(
            at(hsts, &["AccessControlMaxAgeSec"])
                .as_u64()
                .is_some_and(|age| age >= 31_536_000),
            "{policy}: HSTS for at least a year"
        );
        assert_eq!(
            hsts.get("IncludeSubdomains").and_then(Value::as_bool),
            Some(true)
        );
        assert_eq!(
            at(security, &["FrameOptions", "FrameOption"]).as_str(),
            Some("DENY")
        );
        let referrer = str_of(
            at(security, &["ReferrerPolicy", "ReferrerPolicy"]),
            "ReferrerPolicy",
        );
        assert!(
            [
                "no-referrer",
                "same-origin",
                "strict-origin",
                "strict-origin-when-cross-origin"
            ]
            .contains(&referrer),
            "{policy}: Referrer-Policy {referrer} sends more than the origin across origins"
        );
        for header in [
            "StrictTransportSecurity",
            "ContentTypeOptions",
            "FrameOptions",
            "ReferrerPolicy",
            "ContentSecurityPolicy",
        ] {
            assert_eq!(
                at(security, &[header, "Override"]).as_bool(),
                Some(true),
                "{policy}: {header} is set whatever the origin sends"
            );
        }
    }
}

#[test]
fn page_csp_allows_only_our_origin_and_the_realtime_origin() {
    let template = Template::load();

    let realtime = template.parameter("RealtimeOrigin");
    assert_eq!(
        at(realtime, &["Default"]).as_str(),
        Some("https://api.openai.com")
    );
    // Pasted into the header: anchored, so no space or `;` can add sources or directives.
    let pattern = str_of(at(realtime, &["AllowedPattern"]), "AllowedPattern");
    assert!(
        pattern.starts_with("^https://") && pattern.ends_with('$'),
        "RealtimeOrigin's AllowedPattern must admit one https origin only: {pattern}"
    );

    let expected = [
        ("default-src", "'self'"),
        ("script-src", "'self'"),
        ("connect-src", "'self' ${RealtimeOrigin}"),
        ("media-src", "'self'"),
        ("img-src", "'self' data:"),
        ("style-src", "'self'"),
        ("object-src", "'none'"),
        ("base-uri", "'none'"),
        ("frame-ancestors", "'none'"),
        ("form-action", "'none'"),
    ];
    assert_eq!(csp(&template, PAGE_HEADERS), directives(&expected));

    // An API answer is data: it may load, run and frame nothing.
    assert_eq!(
        csp(&template, API_HEADERS),
        directives(&[("default-src", "'none'"), ("frame-ancestors", "'none'")])
    );
}

/// The page reads its origins from `config.json` (web/config.js), never from its URL; the deploy
/// writes the `PageConfig` output there. It must name the API the stack serves (our own origin's
/// `/api` behind CloudFront, the HTTP API's endpoint otherwise, as `ApiBaseUrl` does) and the
/// `RealtimeOrigin` the CSP lets the page connect to, and nothing else.
#[test]
fn page_config_output_names_the_stacks_api_and_realtime_origin() {
    let template = Template::load();
    let output = template.output("PageConfig");
    assert!(
        output.get("Condition").is_none(),
        "PageConfig exists for both front ends"
    );
    let branches = |value: &Value| -> (String, String) {
        let args = at(value, &["Fn::If"])
            .as_sequence()
            .unwrap_or_else(|| panic!("an !If on the front end: {value:?}"));
        let [condition, cloudfront, httpapi] = args.as_slice() else {
            panic!("!If takes a condition and two values: {args:?}");
        };
        assert_eq!(condition.as_str(), Some("UseCloudFront"));
        (
            sub_string(cloudfront)
                .or(cloudfront.as_str())
                .expect("a string")
                .to_string(),
            sub_string(httpapi)
                .or(httpapi.as_str())
                .expect("a string")
                .to_string(),
        )
    };
    let (cloudfront, httpapi) = branches(at(output, &["Value"]));
    let parse = |text: &str| -> BTreeMap<String, String> {
        serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("PageConfig is a JSON object of strings: {text}: {e}"))
    };
    let expected = |api: &str| {
        BTreeMap::from([
            ("api".to_string(), api.to_string()),
            ("realtime".to_string(), "${RealtimeOrigin}".to_string()),
        ])
    };
    assert_eq!(
        parse(&cloudfront),
        expected("/api"),
        "behind CloudFront: the API on the page's own origin"
    );
    assert_eq!(parse(&httpapi), expected("${HttpApi.ApiEndpoint}"));

    // The same API base as the ApiBaseUrl output.
    let api_base = at(template.output("ApiBaseUrl"), &["Value", "Fn::If"])
        .as_sequence()
        .expect("ApiBaseUrl is an !If on the front end");
    assert_eq!(
        sub_string(&api_base[1]),
        Some("https://${Distribution.DomainName}/api")
    );
    assert_eq!(get_att_resource(&api_base[2]), Some("HttpApi"));
}

fn distribution_config(template: &Template) -> &Value {
    at(
        template.resource("Distribution"),
        &["Properties", "DistributionConfig"],
    )
}

fn origins(config: &Value) -> Vec<&Value> {
    one_or_many(at(config, &["Origins"]))
}

/// The template resource origin `id` points at (a function URL or the bucket).
fn origin_resource<'a>(config: &'a Value, id: &str) -> &'a str {
    let origin = origins(config)
        .into_iter()
        .find(|o| o.get("Id").and_then(Value::as_str) == Some(id))
        .unwrap_or_else(|| panic!("the distribution has no origin `{id}`"));
    get_att_resource(at(origin, &["DomainName"]))
        .unwrap_or_else(|| panic!("origin `{id}`: DomainName names no resource of the template"))
}

fn page_origin(template: &Template) -> &Value {
    let config = distribution_config(template);
    let page: Vec<&Value> = origins(config)
        .into_iter()
        .filter(|o| get_att_resource(at(o, &["DomainName"])) == Some(BUCKET))
        .collect();
    let [origin] = page.as_slice() else {
        panic!("one origin of the distribution is the page bucket, got {page:?}");
    };
    origin
}

/// The cache behaviours in CloudFront's order, then the default (pattern `None`).
fn behaviours(config: &Value) -> Vec<(Option<&str>, &Value)> {
    let mut out: Vec<(Option<&str>, &Value)> = config
        .get("CacheBehaviors")
        .map(one_or_many)
        .unwrap_or_default()
        .into_iter()
        .map(|b| (Some(str_of(at(b, &["PathPattern"]), "PathPattern")), b))
        .collect();
    out.push((None, at(config, &["DefaultCacheBehavior"])));
    out
}

/// The behaviour CloudFront picks for `path`: the first whose pattern matches, else the default.
fn route<'a>(config: &'a Value, path: &str) -> &'a Value {
    behaviours(config)
        .into_iter()
        .find(|(pattern, _)| pattern.is_none_or(|p| path_matches(p, path)))
        .map(|(_, behaviour)| behaviour)
        .expect("the default behaviour matches everything")
}

/// CloudFront's path patterns: case-sensitive, `*` any run of characters (also none), `?`
/// exactly one.
fn path_matches(pattern: &str, path: &str) -> bool {
    fn go(p: &[u8], s: &[u8]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((b'*', rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some((b'?', rest)) => !s.is_empty() && go(rest, &s[1..]),
            Some((c, rest)) => s.first() == Some(c) && go(rest, &s[1..]),
        }
    }
    go(pattern.as_bytes(), path.as_bytes())
}

fn methods(behaviour: &Value) -> BTreeSet<&str> {
    one_or_many(at(behaviour, &["AllowedMethods"]))
        .into_iter()
        .map(|m| str_of(m, "a method"))
        .collect()
}

/// Every path of `openapi.yaml`, `{id}` filled in, with the function URL resource its
/// `servers` entry names.
fn contract_paths() -> Vec<(String, &'static str)> {
    let path = repo_root().join("openapi.yaml");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let spec: Value = serde_norway::from_str(&text).expect("openapi.yaml is YAML");
    let paths = at(&spec, &["paths"])
        .as_mapping()
        .expect("openapi.yaml has a paths mapping");
    paths
        .iter()
        .map(|(path, item)| {
            let path = str_of(path, "a path");
            let server = one_or_many(at(item, &["servers"]))[0];
            let url = str_of(at(server, &["url"]), "servers[0].url");
            let function = if url.contains("{ephemeralKeyFunction}") {
                SESSION_URL
            } else if url.contains("{transferFunction}") {
                TRANSFER_URL
            } else {
                panic!("openapi.yaml {path}: servers names no function: {url}");
            };
            (fill_in(path), function)
        })
        .collect()
}

/// `/transfers/{id}` → `/transfers/x1`.
fn fill_in(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with('{') && segment.ends_with('}') {
                "x1"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// The Content-Security-Policy of a response headers policy as directive → sources, the
/// template's `${...}` left in place.
fn csp(template: &Template, policy: &str) -> BTreeMap<String, Vec<String>> {
    let value = at(
        template.resource(policy),
        &[
            "Properties",
            "ResponseHeadersPolicyConfig",
            "SecurityHeadersConfig",
            "ContentSecurityPolicy",
            "ContentSecurityPolicy",
        ],
    );
    let text = value
        .as_str()
        .or_else(|| sub_string(value))
        .unwrap_or_else(|| panic!("{policy}: the CSP is a string or a !Sub of one: {value:?}"));
    let mut out = BTreeMap::new();
    for directive in text.split(';').map(str::trim).filter(|d| !d.is_empty()) {
        let mut words = directive.split_whitespace();
        let name = words.next().expect("a directive has a name").to_string();
        let sources = words.map(str::to_string).collect();
        assert!(
            out.insert(name.clone(), sources).is_none(),
            "{policy}: directive {name} twice"
        );
    }
    out
}

fn directives(list: &[(&str, &str)]) -> BTreeMap<String, Vec<String>> {
    list.iter()
        .map(|(name, sources)| {
            (
                name.to_string(),
                sources.split_whitespace().map(str::to_string).collect(),
            )
        })
        .collect()
}
