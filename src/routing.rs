//! Choosing candidates (SPEC §2) and where a request starts among them (SPEC §3, `rotation`).
//! Pure functions over endpoint lists: no I/O, no clock, no breaker locks.

pub mod rotation;

pub use rotation::{Rotation, RotationUpdate, advance, affinity_start, attempt_cap, start_index};

use std::borrow::Cow;

use crate::endpoint::Endpoint;
use crate::protocol::Route;
use crate::protocol::errors::{ErrorKind, GatewayError};

/// SPEC §2 step 1, `list_routable`: the enabled endpoints compatible with this route; if any of
/// them is in the fast queue, only those, by `fast_sort_order`; else all, by `sort_order`.
/// (The seeds apply the fast queue globally; per protocol keeps a fast Responses endpoint from
/// starving Claude traffic.)
pub fn list_routable<T: AsRef<Endpoint>>(all: &[T], route: Route) -> Vec<&T> {
    let mut usable: Vec<&T> =
        all.iter().filter(|e| e.as_ref().enabled && route.compatible_with(e.as_ref().format)).collect();
    if usable.iter().any(|e| e.as_ref().fast) {
        usable.retain(|e| e.as_ref().fast);
        usable.sort_by(|a, b| {
            let (a, b) = (a.as_ref(), b.as_ref());
            (a.fast_sort_order, a.sort_order, &a.name).cmp(&(b.fast_sort_order, b.sort_order, &b.name))
        });
    } else {
        usable.sort_by(|a, b| {
            let (a, b) = (a.as_ref(), b.as_ref());
            (a.sort_order, &a.name).cmp(&(b.sort_order, &b.name))
        });
    }
    usable
}

/// As many candidates as a request's lists hold without an allocation.
pub const FEW_CANDIDATES: usize = 8;

/// The candidates a breaker filter kept, in their order.
pub type Live<'a, T> = smallvec::SmallVec<[&'a T; FEW_CANDIDATES]>;

/// SPEC §2 step 4, the breaker filter: keep the candidates whose breaker lets requests through
/// (an Open one still cooling down is dropped; a cooled-down one stays, to be probed), and say
/// why each dropped one was. `routable` asks a breaker without taking a permit. The live list is
/// held inline up to `FEW_CANDIDATES`, the usual count: every request makes one.
pub fn breaker_filter<T, D>(candidates: &[T], routable: impl Fn(&T) -> Result<(), D>) -> (Live<'_, T>, Vec<D>) {
    let mut denials = Vec::new();
    let live = candidates
        .iter()
        .filter(|e| match routable(e) {
            Ok(()) => true,
            Err(d) => {
                denials.push(d);
                false
            }
        })
        .collect();
    (live, denials)
}

/// The result of SPEC §2 step 2.
#[derive(Debug)]
pub struct Explicit<'a, T> {
    /// The endpoint the client named, if any.
    pub endpoint: Option<&'a T>,
    /// The model with any `@name/` prefix removed (`None` if the request has no model).
    pub model: Option<Cow<'a, str>>,
}

/// SPEC §2 step 2: resolve `x-ccmesh-endpoint`, `?endpoint=` and `@name/model`.
/// A model `@X/rest` whose `X` is not an endpoint name is an ordinary model (`@cf/meta/llama-3`).
pub fn resolve_explicit<'a, T: AsRef<Endpoint>>(
    all: &'a [T],
    route: Route,
    header: Option<&str>,
    query: Option<&str>,
    model: Option<&'a str>,
) -> Result<Explicit<'a, T>, GatewayError> {
    let find = |name: &str| all.iter().find(|e| e.as_ref().name == name);
    let mut named: Vec<(&'static str, &'a T)> = Vec::new();
    for (source, value) in [("the x-ccmesh-endpoint header", header), ("the endpoint query parameter", query)] {
        let Some(name) = value.map(str::trim) else { continue };
        let Some(endpoint) = find(name) else {
            return Err(GatewayError::new(
                ErrorKind::InvalidRequest,
                "endpoint_not_found",
                format!(
                    "{source} names endpoint '{name}', which does not exist; list endpoints with GET /api/endpoints or `ccmesh endpoint list`"
                ),
            ));
        };
        named.push((source, endpoint));
    }
    let mut model_out = model.map(Cow::Borrowed);
    if let Some(rest) = model.and_then(|m| m.strip_prefix('@'))
        && let Some((name, inner)) = rest.split_once('/')
        && let Some(endpoint) = find(name)
    {
        named.push(("the model prefix @name/", endpoint));
        model_out = Some(Cow::Borrowed(inner));
    }
    let Some(&(source, first)) = named.first() else {
        return Ok(Explicit { endpoint: None, model: model_out });
    };
    if let Some((other_source, other)) = named.iter().find(|(_, e)| e.as_ref().id != first.as_ref().id) {
        return Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "conflicting_endpoints",
            format!(
                "{source} names endpoint '{}' but {other_source} names '{}'; name one endpoint",
                first.as_ref().name,
                other.as_ref().name
            ),
        ));
    }
    let endpoint = first.as_ref();
    if !endpoint.enabled {
        return Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "endpoint_disabled",
            format!(
                "endpoint '{}' is disabled; enable it (`ccmesh endpoint enable {}`, or PATCH /api/endpoints/{} {{\"enabled\": true}}) or name another",
                endpoint.name, endpoint.name, endpoint.name
            ),
        ));
    }
    if !route.compatible_with(endpoint.format) {
        return Err(GatewayError::new(
            ErrorKind::InvalidRequest,
            "endpoint_incompatible",
            format!(
                "endpoint '{}' speaks the {} format, which cannot serve {} requests",
                endpoint.name,
                endpoint.format,
                route.protocol().as_str()
            ),
        ));
    }
    Ok(Explicit { endpoint: Some(first), model: model_out })
}

/// SPEC §2 step 3: keep the endpoints that serve `model`; when none does, a 404 that says which
/// endpoints serve what, and whether the fast queue is what hides a matching endpoint.
pub fn filter_by_model<'a, T: AsRef<Endpoint>>(
    routable: Vec<&'a T>,
    all: &[T],
    route: Route,
    model: &str,
) -> Result<Vec<&'a T>, GatewayError> {
    if routable.iter().any(|e| e.as_ref().serves(model)) {
        // Filtered in place: the list is the request's own, and a second one would cost an
        // allocation on every request.
        let mut serving = routable;
        serving.retain(|e| e.as_ref().serves(model));
        return Ok(serving);
    }
    let compatible = all.iter().map(AsRef::as_ref).filter(|e| e.enabled && route.compatible_with(e.format));
    let hidden: Vec<&str> =
        compatible.clone().filter(|e| !e.fast && e.serves(model)).map(|e| e.name.as_str()).collect();
    let message = if !hidden.is_empty() {
        format!(
            "no endpoint in the fast queue serves model '{model}'; '{}' serves it but is not in the queue (add it with PUT /api/fast-queue or `ccmesh fast set`)",
            hidden.join("', '")
        )
    } else {
        let served: Vec<String> = routable.iter().map(|e| describe_models(e.as_ref())).collect();
        format!(
            "no enabled endpoint serves model '{model}'; endpoints serve: {}",
            if served.is_empty() { "nothing".to_string() } else { served.join(", ") }
        )
    };
    Err(GatewayError::new(ErrorKind::NotFound, "model_not_found", message).with_param("model"))
}

fn describe_models(e: &Endpoint) -> String {
    let mut names: Vec<&str> = e.models.iter().map(|m| m.as_str()).collect();
    names.extend(e.model_map.iter().map(|(k, _)| k.as_str()));
    format!("{} ({})", e.name, names.join(", "))
}

/// SPEC §2 step 0: nothing enabled is compatible with this route.
pub fn nothing_configured(route: Route) -> GatewayError {
    let protocol = route.protocol();
    GatewayError::new(
        ErrorKind::Overloaded,
        "no_endpoints",
        format!(
            "no enabled endpoint can serve {} requests; add one with POST /api/endpoints, the dashboard, or `ccmesh endpoint add`",
            protocol.as_str()
        ),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::endpoint::{EndpointId, ModelPattern, TestResult};
    use crate::protocol::Format;
    use crate::protocol::Protocol;
    use std::collections::BTreeMap;

    fn ep(id: i64, name: &str, format: Format) -> Endpoint {
        Endpoint {
            id: EndpointId(id),
            name: name.into(),
            base_url: "http://127.0.0.1:1".into(),
            api_key: "k".into(),
            format,
            models: vec![],
            model_map: vec![],
            enabled: true,
            fast: false,
            fast_sort_order: 0,
            sort_order: id,
            headers: BTreeMap::new(),
            test_model: None,
            test: TestResult::default(),
            price_multiplier: 1.0,
        }
    }

    /// Endpoints of these names (anthropic), for tests elsewhere.
    pub(crate) fn endpoints(names: &[&str]) -> Vec<E> {
        names.iter().enumerate().map(|(i, n)| E(ep(i as i64 + 1, n, Format::Anthropic))).collect()
    }

    #[derive(Debug)]
    pub(crate) struct E(Endpoint);
    impl AsRef<Endpoint> for E {
        fn as_ref(&self) -> &Endpoint {
            &self.0
        }
    }

    fn names<T: AsRef<Endpoint>>(v: &[&T]) -> Vec<String> {
        v.iter().map(|e| e.as_ref().name.clone()).collect()
    }

    const CLAUDE: Route = Route::Protocol(Protocol::Claude);
    const OPENAI: Route = Route::Protocol(Protocol::Openai);

    const ANTHROPIC_FAMILY: Route = Route::PassThrough { anthropic: true };
    const OPENAI_FAMILY: Route = Route::PassThrough { anthropic: false };

    #[test]
    fn routable_falls_back_to_all_enabled_by_sort_order() {
        let mut a = ep(1, "a", Format::Anthropic);
        a.sort_order = 5;
        let b = ep(2, "b", Format::Anthropic);
        let mut c = ep(3, "c", Format::Anthropic);
        c.enabled = false;
        let d = ep(4, "d", Format::Openai);
        let all = [E(a), E(b), E(c), E(d)];
        // With conversion every format serves every protocol.
        assert_eq!(names(&list_routable(&all, CLAUDE)), ["b", "d", "a"]);
        assert_eq!(names(&list_routable(&all, OPENAI)), ["b", "d", "a"]);
        // Pass-through paths stay within their family.
        assert_eq!(names(&list_routable(&all, ANTHROPIC_FAMILY)), ["b", "a"]);
        assert_eq!(names(&list_routable(&all, OPENAI_FAMILY)), ["d"]);
    }

    #[test]
    fn fast_queue_is_per_protocol_and_ordered_by_fast_sort_order() {
        let a = ep(1, "a", Format::Anthropic);
        let mut b = ep(2, "b", Format::Anthropic);
        b.fast = true;
        b.fast_sort_order = 2;
        let mut c = ep(3, "c", Format::Anthropic);
        c.fast = true;
        c.fast_sort_order = 1;
        let mut r = ep(4, "r", Format::Responses);
        r.fast = true;
        let o = ep(5, "o", Format::Openai);
        let mut disabled_fast = ep(6, "x", Format::Openai);
        disabled_fast.fast = true;
        disabled_fast.enabled = false;
        let all = [E(a), E(b), E(c), E(r), E(o), E(disabled_fast)];
        assert_eq!(names(&list_routable(&all, CLAUDE)), ["r", "c", "b"]);
        // The queue is evaluated among the endpoints compatible with the request: a fast
        // Anthropic endpoint does not empty the OpenAI pass-through family, and a disabled
        // fast endpoint counts for nothing.
        assert_eq!(names(&list_routable(&all, ANTHROPIC_FAMILY)), ["c", "b"]);
        assert_eq!(names(&list_routable(&all, OPENAI_FAMILY)), ["r"]);
        let only_openai = [E(ep(5, "o", Format::Openai)), E(ep(7, "x", Format::Anthropic))];
        let mut fast_anthropic = only_openai;
        fast_anthropic[1].0.fast = true;
        assert_eq!(names(&list_routable(&fast_anthropic, OPENAI_FAMILY)), ["o"]);
    }

    #[test]
    fn fast_ties_break_by_sort_order_then_name() {
        let mut a = ep(1, "zz", Format::Anthropic);
        a.fast = true;
        a.sort_order = 1;
        let mut b = ep(2, "aa", Format::Anthropic);
        b.fast = true;
        b.sort_order = 1;
        let mut c = ep(3, "mm", Format::Anthropic);
        c.fast = true;
        c.sort_order = 0;
        let all = [E(a), E(b), E(c)];
        assert_eq!(names(&list_routable(&all, CLAUDE)), ["mm", "aa", "zz"]);
    }

    #[test]
    fn explicit_by_header_query_and_model_prefix() {
        let all = [E(ep(1, "kimi", Format::Anthropic)), E(ep(2, "glm", Format::Anthropic))];
        let x = resolve_explicit(&all, CLAUDE, Some("kimi"), None, Some("m")).unwrap();
        assert_eq!(x.endpoint.unwrap().0.name, "kimi");
        assert_eq!(x.model.as_deref(), Some("m"));
        let x = resolve_explicit(&all, CLAUDE, None, Some("glm"), None).unwrap();
        assert_eq!(x.endpoint.unwrap().0.name, "glm");
        let x = resolve_explicit(&all, CLAUDE, None, None, Some("@glm/glm-4.6")).unwrap();
        assert_eq!(x.endpoint.unwrap().0.name, "glm");
        assert_eq!(x.model.as_deref(), Some("glm-4.6"));
        // Agreeing sources are fine.
        assert!(resolve_explicit(&all, CLAUDE, Some("glm"), Some("glm"), Some("@glm/x")).is_ok());
    }

    #[test]
    fn at_prefix_that_is_not_an_endpoint_is_an_ordinary_model() {
        let all = [E(ep(1, "kimi", Format::Anthropic))];
        let x = resolve_explicit(&all, CLAUDE, None, None, Some("@cf/meta/llama-3")).unwrap();
        assert!(x.endpoint.is_none());
        assert_eq!(x.model.as_deref(), Some("@cf/meta/llama-3"));
        let x = resolve_explicit(&all, CLAUDE, None, None, Some("@kimi")).unwrap();
        assert!(x.endpoint.is_none());
    }

    #[test]
    fn explicit_errors() {
        let mut off = ep(2, "off", Format::Anthropic);
        off.enabled = false;
        let all = [E(ep(1, "kimi", Format::Anthropic)), E(off), E(ep(3, "oa", Format::Openai))];
        let code = |h: Option<&str>, q: Option<&str>, m: Option<&str>| {
            let e = resolve_explicit(&all, CLAUDE, h, q, m).unwrap_err();
            assert_eq!(e.kind, ErrorKind::InvalidRequest);
            e.code
        };
        assert_eq!(code(Some("nope"), None, None), "endpoint_not_found");
        assert_eq!(code(None, Some("nope"), None), "endpoint_not_found");
        assert_eq!(code(Some("off"), None, None), "endpoint_disabled");
        assert_eq!(code(None, None, Some("@off/m")), "endpoint_disabled");
        let e = resolve_explicit(&all, ANTHROPIC_FAMILY, Some("oa"), None, None).unwrap_err();
        assert_eq!(e.code, "endpoint_incompatible");
        assert!(resolve_explicit(&all, CLAUDE, Some("oa"), None, None).is_ok(), "converted");
        assert_eq!(code(Some("kimi"), Some("oa"), None), "conflicting_endpoints");
        assert_eq!(code(Some("kimi"), None, Some("@oa/x")), "conflicting_endpoints");
    }

    #[test]
    fn model_filter_keeps_servers_and_explains_404() {
        let mut a = ep(1, "a", Format::Anthropic);
        a.models = vec![ModelPattern::new("claude-*")];
        let mut b = ep(2, "b", Format::Anthropic);
        b.models = vec![ModelPattern::new("glm-4.6")];
        b.model_map = vec![(ModelPattern::new("claude-opus-4"), "glm-4.6".into())];
        let all = [E(a), E(b)];
        let routable = list_routable(&all, CLAUDE);
        assert_eq!(names(&filter_by_model(routable.clone(), &all, CLAUDE, "claude-opus-4").unwrap()), ["a", "b"]);
        assert_eq!(names(&filter_by_model(routable.clone(), &all, CLAUDE, "glm-4.6").unwrap()), ["b"]);
        let e = filter_by_model(routable, &all, CLAUDE, "gpt-5").unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert_eq!(
            e.message,
            "no enabled endpoint serves model 'gpt-5'; endpoints serve: a (claude-*), b (glm-4.6, claude-opus-4)"
        );
    }

    #[test]
    fn model_filter_names_endpoint_hidden_by_fast_queue() {
        let mut a = ep(1, "a", Format::Anthropic);
        a.fast = true;
        a.models = vec![ModelPattern::new("claude-*")];
        let mut y = ep(2, "y", Format::Anthropic);
        y.models = vec![ModelPattern::new("glm-*")];
        let all = [E(a), E(y)];
        let e = filter_by_model(list_routable(&all, CLAUDE), &all, CLAUDE, "glm-4.6").unwrap_err();
        assert!(e.message.contains("'y' serves it but is not in the queue"), "{}", e.message);
    }

    #[test]
    fn the_breaker_filter_keeps_order_and_says_why_each_is_dropped() {
        let all =
            [E(ep(1, "a", Format::Anthropic)), E(ep(2, "b", Format::Anthropic)), E(ep(3, "c", Format::Anthropic))];
        let (live, denied) =
            breaker_filter(&all, |e| if e.0.name == "b" { Err(format!("{} open", e.0.name)) } else { Ok(()) });
        assert_eq!(names(&live), ["a", "c"]);
        assert_eq!(denied, ["b open"]);
        let (live, denied) = breaker_filter(&all, |_| Err::<(), _>(()));
        assert!(live.is_empty());
        assert_eq!(denied.len(), 3);
    }
}
