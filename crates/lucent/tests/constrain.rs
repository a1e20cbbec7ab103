//! Constrained decoding (`Sampling::constrain`, the mask link of the sampler chain) on
//! SmolLM2 (GGUF byte-level BPE) and Gemma 3 (GGUF SentencePiece), held to the
//! unconstrained run of the same model:
//!
//! - a constraint that the free (unconstrained, greedy) answer already satisfies gives
//!   exactly its ids, and ends where it ended;
//! - a constraint that forbids the free answer's token at step k (found by feeding the
//!   free ids to the compiled mask) gives the free ids before k and another id at k;
//! - sampled answers at temperature 1 over several schemas (enums, arrays, nested
//!   objects, `anyOf`, required keys, string patterns) are JSON that validates, every
//!   one; regexes and Lark grammars hold on both vocabularies;
//! - a schema, regex or grammar the engine cannot use is an error that says what is
//!   wrong, and a constraint without a vocabulary is refused by name.
//!
//! The models come from the cache (`lucent::io::fetch::ensure`, fetching if needed).

use std::sync::OnceLock;

use lucent::io::fetch::{self, Silent};
use lucent::pipeline::constrain::Constraint;
use lucent::pipeline::generate::TextModel;
use lucent::pipeline::{Message, Sampling, StopReason};
use serde_json::{json, Value};

fn load(name: &str) -> TextModel {
    TextModel::load(&fetch::ensure(name, &mut Silent).expect("fetch")).expect("load")
}

fn smollm2() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("smollm2"))
}

fn gemma3() -> &'static TextModel {
    static M: OnceLock<TextModel> = OnceLock::new();
    M.get_or_init(|| load("gemma3"))
}

/// A chat prompt of SmolLM2 with one user message.
fn chat(tm: &TextModel, text: &str) -> Vec<u32> {
    tm.encode_chat(&[Message::new("user", text)])
        .expect("chat prompt")
}

/// Generate from `prompt` with `s` (a fresh cache each time).
fn run(tm: &TextModel, prompt: &[u32], s: &Sampling) -> lucent::Generation {
    let mut cache = tm.new_cache(prompt.len() + s.max_tokens + 1);
    tm.generate(prompt, s, &mut cache, &mut |_| {})
        .expect("generate")
}

fn greedy(n: usize, c: Option<Constraint>) -> Sampling {
    Sampling {
        constrain: c,
        ..Sampling::greedy().max_tokens(n)
    }
}

const QUESTION: &str = "Give the capital of France as a JSON object with the keys \"city\" and \"country\". Answer with the JSON only.";

/// The schema SmolLM2's free answer to [`QUESTION`] satisfies, with `country` as given.
fn city_schema(country: Value) -> Value {
    json!({
        "type": "object",
        "properties": {"city": {"type": "string"}, "country": country},
        "required": ["city", "country"],
        "additionalProperties": false
    })
}

/// A Lark grammar for a fenced JSON block valid under `schema` (SmolLM2 fences its JSON).
fn fenced(schema: &Value) -> Constraint {
    Constraint::Lark(format!("start: \"```json\\n\" %json {schema} \"\\n```\""))
}

/// The first of `ids` that `c` does not allow (fed one by one to the compiled mask), or
/// None if it allows them all.
fn first_refused(tm: &TextModel, c: &Constraint, ids: &[u32]) -> Option<usize> {
    let mut mask = tm.compile(c).expect("compile");
    let v = tm.model.config.vocab_size;
    for (k, &id) in ids.iter().enumerate() {
        let mut z = vec![0.0f32; v];
        mask.apply(&mut z).expect("mask");
        if z[id as usize] == f32::NEG_INFINITY {
            return Some(k);
        }
        mask.accept(id).expect("accept");
    }
    None
}

#[test]
fn a_constraint_the_free_answer_satisfies_changes_no_token() {
    let tm = smollm2();
    let p = chat(tm, QUESTION);
    let free = run(tm, &p, &greedy(80, None));
    assert!(
        matches!(free.stop, StopReason::EndOfGeneration(_)),
        "{free:?}"
    );
    let c = fenced(&city_schema(json!({"type": "string"})));
    assert_eq!(first_refused(tm, &c, &free.ids), None, "{:?}", free.text);
    let g = run(tm, &p, &greedy(80, Some(c)));
    assert_eq!(g.ids, free.ids, "{:?} vs {:?}", g.text, free.text);
    assert_eq!(g.text, free.text);
    // It ends where the free run ended: at the grammar's end, with an end token.
    assert!(matches!(g.stop, StopReason::EndOfGeneration(_)), "{g:?}");
    // The same for a regex the answer matches.
    let r =
        Constraint::Regex(r"```json\n\{\n( +\x22[a-z]+\x22: \x22[A-Za-z]+\x22,?\n)+\}\n```".into());
    assert_eq!(first_refused(tm, &r, &free.ids), None);
    assert_eq!(run(tm, &p, &greedy(80, Some(r))).ids, free.ids);
}

#[test]
fn a_constraint_that_forbids_step_k_changes_step_k_and_not_before() {
    let tm = smollm2();
    let p = chat(tm, QUESTION);
    let free = run(tm, &p, &greedy(80, None));
    // The free answer writes "FRANCE"; the enum allows "France" only.
    let c = fenced(&city_schema(json!({"enum": ["France"]})));
    let k = first_refused(tm, &c, &free.ids).expect("the enum refuses a free token");
    assert!(k > 5, "refused at step {k}: {:?}", free.text);
    let g = run(tm, &p, &greedy(80, Some(c)));
    assert_eq!(g.ids[..k], free.ids[..k], "steps before {k}");
    assert_ne!(g.ids[k], free.ids[k], "step {k}");
    // What it wrote is the fenced JSON with the enum's value.
    let body = g
        .text
        .strip_prefix("```json\n")
        .and_then(|t| t.strip_suffix("\n```"))
        .unwrap_or_else(|| panic!("not fenced: {:?}", g.text));
    let v: Value = serde_json::from_str(body).expect("JSON");
    assert_eq!(v["country"], "France", "{v}");
    assert!(v["city"].is_string(), "{v}");
    // A plain JSON schema forbids the fence: step 0 changes, and the text is JSON.
    let j = Constraint::JsonSchema(city_schema(json!({"type": "string"})));
    assert_eq!(first_refused(tm, &j, &free.ids), Some(0));
    let g = run(tm, &p, &greedy(80, Some(j)));
    assert_ne!(g.ids[0], free.ids[0]);
    let v: Value = serde_json::from_str(&g.text).expect("JSON");
    assert!(v["city"].is_string() && v["country"].is_string(), "{v}");
}

/// The schemas of the sampled runs, each with a prompt and a check of what the schema
/// says (the server's test validates with the `jsonschema` package too).
fn schemas() -> Vec<(&'static str, Value)> {
    vec![
        (
            "Describe a person as JSON.",
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "pattern": "^[A-Z][a-z]+$"},
                    "age": {"type": "integer", "minimum": 0, "maximum": 120},
                    "role": {"enum": ["student", "teacher", "engineer"]}
                },
                "required": ["name", "age", "role"],
                "additionalProperties": false
            }),
        ),
        (
            "List three colours as JSON.",
            json!({
                "type": "object",
                "properties": {
                    "colours": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                "minItems": 1, "maxItems": 3}
                },
                "required": ["colours"],
                "additionalProperties": false
            }),
        ),
        (
            "Describe a book and its author as JSON.",
            json!({
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 40},
                    "author": {
                        "type": "object",
                        "properties": {"name": {"type": "string", "maxLength": 30},
                                       "born": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
                        "required": ["name", "born"],
                        "additionalProperties": false
                    }
                },
                "required": ["title", "author"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Whether `v` satisfies schema `i` of [`schemas`] (checked field by field).
fn satisfies(i: usize, v: &Value) -> bool {
    let o = match v.as_object() {
        Some(o) => o,
        None => return false,
    };
    let keys = |want: &[&str]| o.len() == want.len() && want.iter().all(|k| o.contains_key(*k));
    match i {
        0 => {
            let name = v["name"].as_str().unwrap_or("");
            let mut c = name.chars();
            keys(&["name", "age", "role"])
                && c.next().is_some_and(|c| c.is_ascii_uppercase())
                && name.len() >= 2
                && c.all(|c| c.is_ascii_lowercase())
                && v["age"].as_u64().is_some_and(|a| a <= 120)
                && ["student", "teacher", "engineer"].contains(&v["role"].as_str().unwrap_or(""))
        }
        1 => {
            let c = v["colours"].as_array();
            keys(&["colours"])
                && c.is_some_and(|c| {
                    (1..=3).contains(&c.len())
                        && c.iter()
                            .all(|s| s.as_str().is_some_and(|s| s.chars().count() <= 12))
                })
        }
        _ => {
            let a = &v["author"];
            keys(&["title", "author"])
                && v["title"].as_str().is_some_and(|t| t.chars().count() <= 40)
                && a.as_object().is_some_and(|o| o.len() == 2)
                && a["name"].as_str().is_some_and(|t| t.chars().count() <= 30)
                && (a["born"].is_null() || a["born"].is_i64() || a["born"].is_u64())
        }
    }
}

#[test]
fn sampled_answers_always_validate() {
    let tm = smollm2();
    let mut n = 0;
    for (i, (q, schema)) in schemas().into_iter().enumerate() {
        let p = chat(tm, q);
        for seed in 0..6 {
            let s = Sampling {
                temperature: 1.0,
                top_k: 0,
                top_p: 1.0,
                min_p: 0.0,
                seed,
                max_tokens: 200,
                constrain: Some(Constraint::JsonSchema(schema.clone())),
                ..Sampling::greedy()
            };
            let g = run(tm, &p, &s);
            assert!(
                matches!(g.stop, StopReason::EndOfGeneration(_)),
                "schema {i} seed {seed} did not finish: {:?} {:?}",
                g.stop,
                g.text
            );
            let v: Value = serde_json::from_str(&g.text)
                .unwrap_or_else(|e| panic!("schema {i} seed {seed}: {e}: {:?}", g.text));
            assert!(satisfies(i, &v), "schema {i} seed {seed}: {v}");
            // Whitespace between tokens is bounded (JSON_WHITESPACE: at most two
            // newlines in a gap; a raw newline is never inside a JSON string).
            assert!(!g.text.contains("\n\n\n"), "{:?}", g.text);
            n += 1;
        }
    }
    println!("{n} sampled answers, every one valid");
}

#[test]
fn regexes_and_grammars_hold_on_both_vocabularies() {
    let sm = smollm2();
    let ge = gemma3();
    // SmolLM2's chat prompt; Gemma 3 (a base model here) continues a raw prompt.
    let cases: Vec<(&TextModel, Vec<u32>)> = vec![
        (sm, chat(sm, "Is the sky blue? Answer yes or no.")),
        (
            ge,
            ge.encode("Question: Is the sky blue? Answer:")
                .expect("encode"),
        ),
    ];
    for (tm, p) in &cases {
        let yes_no = Constraint::Regex("(yes|no)".into());
        let g = run(tm, p, &greedy(10, Some(yes_no)));
        assert!(g.text == "yes" || g.text == "no", "{:?}", g.text);
        assert!(matches!(g.stop, StopReason::EndOfGeneration(_)), "{g:?}");
        let sum = Constraint::Lark(
            std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../examples/arithmetic.lark"
            ))
            .expect("examples/arithmetic.lark"),
        );
        for seed in 0..3 {
            let s = Sampling {
                constrain: Some(sum.clone()),
                ..Sampling::default().seed(seed).max_tokens(40)
            };
            let g = run(tm, p, &s);
            let parts: Vec<&str> = g.text.split(' ').collect();
            let num = |s: &str| (1..=4).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_digit());
            assert!(
                parts.len() == 5
                    && num(parts[0])
                    && parts[1] == "+"
                    && num(parts[2])
                    && parts[3] == "="
                    && num(parts[4]),
                "{:?}",
                g.text
            );
        }
    }
    // Any JSON object, on prompts that ask for one.
    for (tm, p) in [
        (sm, chat(sm, QUESTION)),
        (
            ge,
            ge.encode("A JSON object describing Paris: ")
                .expect("encode"),
        ),
    ] {
        let obj = run(tm, &p, &greedy(120, Some(Constraint::JsonObject)));
        let v: Value = serde_json::from_str(&obj.text)
            .unwrap_or_else(|e| panic!("{e}: {:?} {:?}", obj.text, obj.stop));
        assert!(v.is_object(), "{v}");
        assert!(
            matches!(obj.stop, StopReason::EndOfGeneration(_)),
            "{obj:?}"
        );
    }
}

#[test]
fn constraints_the_engine_cannot_use_are_errors_that_say_why() {
    let tm = smollm2();
    let err = |c: Constraint| tm.compile(&c).expect_err("an error").to_string();
    let e = err(Constraint::JsonSchema(json!({"type": "strin"})));
    assert!(e.contains("JSON schema") && e.contains("strin"), "{e}");
    // A keyword the engine does not implement, a reference to nowhere, a bad pattern:
    // each named.
    let e = err(Constraint::JsonSchema(
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true}),
    ));
    assert!(e.contains("uniqueItems"), "{e}");
    let e = err(Constraint::JsonSchema(
        json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
    ));
    assert!(e.contains("#/$defs/missing"), "{e}");
    let e = err(Constraint::JsonSchema(
        json!({"properties": {"a": {"type": "string", "pattern": "(unclosed"}}}),
    ));
    assert!(e.contains("unclosed group"), "{e}");
    // Each schema error says where in the schema the fault is, as a JSON pointer: the
    // deepest subschema that fails alone with the same words.
    let at = |schema: Value| {
        let e = err(Constraint::JsonSchema(schema));
        let start = e.find("(at ").map(|i| i + 4).expect("a place");
        e[start..start + e[start..].find(')').expect("closed")].to_string()
    };
    assert_eq!(
        at(
            json!({"type": "object", "properties": {"a": {"type": "object",
            "properties": {"b/c": {"type": "nope"}}}}})
        ),
        "#/properties/a/properties/b~1c"
    );
    assert_eq!(
        at(json!({"type": "array", "items": {"type": "array", "items": {"uniqueItems": true}}})),
        "#/items/items"
    );
    assert_eq!(
        at(json!({"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "(("}]})),
        "#/anyOf/1"
    );
    assert_eq!(
        at(
            json!({"$defs": {"p": {"type": "object", "properties": {"x": {"$ref": "#/$defs/q"}}},
            "q": {"type": "intger"}}, "$ref": "#/$defs/p"})
        ),
        "#/$defs/q"
    );
    assert_eq!(
        at(json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}})),
        "#/properties/a"
    );
    assert_eq!(
        at(
            json!({"$defs": {"a": {"type": "array"}}, "type": "object", "properties": {
            "x": {"allOf": [{"$ref": "#/$defs/a"}], "uniqueItems": true}}})
        ),
        "#/properties/x"
    );
    assert_eq!(at(json!({"type": "array", "uniqueItems": true})), "#");
    let e = err(Constraint::Regex("(unclosed".into()));
    assert!(e.contains("regex"), "{e}");
    let e = err(Constraint::Lark("start: missing_rule".into()));
    assert!(
        e.contains("Lark grammar") && e.contains("missing_rule"),
        "{e}"
    );
    assert!(Constraint::json_schema_str("{not json").is_err());
    // The sampler alone has no vocabulary to compile against: refused by name.
    let s = greedy(4, Some(Constraint::JsonObject));
    let e = lucent::pipeline::Sampler::new(&s)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("vocabulary"), "{e}");
}

#[test]
fn a_kept_grammar_answers_as_a_fresh_compile_does() {
    let tm = smollm2();
    // A clone with a vocabulary of its own: it compiles everything afresh.
    let mut fresh = tm.clone();
    fresh.vocabulary = Default::default();
    for (i, (q, schema)) in schemas().into_iter().enumerate() {
        let p = chat(tm, q);
        let s = |seed| Sampling {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            seed,
            max_tokens: 200,
            constrain: Some(Constraint::JsonSchema(schema.clone())),
            ..Sampling::greedy()
        };
        // Each schema compiled once here, then its kept start state copied twice more:
        // every answer equals the one of a vocabulary that compiles it for the first
        // time (a copy's generation never moves the kept start state).
        for seed in [7, 8, 7] {
            fresh.vocabulary = Default::default();
            let want = run(&fresh, &p, &s(seed));
            let got = run(tm, &p, &s(seed));
            assert_eq!(got.ids, want.ids, "schema {i} seed {seed}");
        }
    }
    // The cache keeps the last GRAMMAR_CACHE constraints, no more.
    let v = tm.vocabulary().expect("vocabulary");
    for n in 0..lucent::pipeline::constrain::GRAMMAR_CACHE + 3 {
        tm.compile(&Constraint::Regex(format!("[a-z]{{{n}}}")))
            .expect("compile");
    }
    assert_eq!(
        v.kept_grammars(),
        lucent::pipeline::constrain::GRAMMAR_CACHE
    );
}
