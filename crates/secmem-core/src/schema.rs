//! Config schema: sections declared with [`config_section!`](crate::config_section) carry a
//! default and a description for every field. Configs are built in layers — built-in
//! defaults, then a preset, then a user file, then `-p dotted.key=value` overrides — merged
//! on the TOML tree, so that:
//!
//! * an unknown key in any layer is an error naming the full dotted path and the known keys;
//! * a value of the wrong type is an error naming the field;
//! * a field missing from a layer keeps the value of the layer below (never a silent default
//!   of the wrong instance: L1 and LLC share `CacheConfig` but not its defaults).

use crate::error::ConfigError;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// Documentation of one field of a section.
#[derive(Clone, Debug)]
pub struct FieldDoc {
    pub name: &'static str,
    pub description: &'static str,
    /// Present when the field is itself a section (a TOML table).
    pub children: Option<Vec<FieldDoc>>,
}

/// Implemented for every type that may appear as a config field. Sections return their field
/// docs; scalars return `None`.
pub trait DocNode {
    fn children() -> Option<Vec<FieldDoc>> { None }
}
macro_rules! scalar_doc_node { ($($t:ty),*) => { $(impl DocNode for $t {})* } }
scalar_doc_node!(u8, u16, u32, u64, usize, i32, i64, f32, f64, bool, String);
impl<T> DocNode for Vec<T> {}

/// A whole config tree: a section that can be loaded in layers.
pub trait Section: Serialize + DeserializeOwned + Default + DocNode {
    fn field_docs() -> Vec<FieldDoc> { Self::children().unwrap_or_default() }
}

/// Declares a config section. Syntax per field: `name: Type = default => "description";`.
#[macro_export]
macro_rules! config_section {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $field:ident : $ty:ty = $default:expr => $desc:literal ; )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, ::serde::Serialize, ::serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            $( #[doc = $desc] pub $field : $ty, )*
        }
        impl ::core::default::Default for $name {
            fn default() -> Self { $name { $( $field: $default, )* } }
        }
        impl $crate::schema::DocNode for $name {
            fn children() -> Option<Vec<$crate::schema::FieldDoc>> {
                Some(vec![ $( $crate::schema::FieldDoc {
                    name: stringify!($field),
                    description: $desc,
                    children: <$ty as $crate::schema::DocNode>::children(),
                }, )* ])
            }
        }
        impl $crate::schema::Section for $name {}
    };
}

/// Declares a closed enum used as a config value, spelled in kebab-case in files.
/// Syntax: `pub enum Name { Variant => "spelling" : "description", ... }`.
#[macro_export]
macro_rules! config_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $variant:ident => $spelling:literal : $desc:literal ),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, ::serde::Serialize, ::serde::Deserialize)]
        pub enum $name { $( #[serde(rename = $spelling)] #[doc = $desc] $variant, )* }
        impl $name {
            /// Every spelling accepted in config files, in declaration order.
            pub const SPELLINGS: &'static [&'static str] = &[ $( $spelling ),* ];
            pub fn as_str(self) -> &'static str { match self { $( $name::$variant => $spelling, )* } }
        }
        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result { f.write_str(self.as_str()) }
        }
        impl ::core::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s { $( $spelling => Ok($name::$variant), )*
                    _ => Err(format!("unknown value '{}'; known: {}", s, Self::SPELLINGS.join(", "))) }
            }
        }
        impl $crate::schema::DocNode for $name {}
    };
}

/// The fully-defaulted TOML tree of a section.
pub fn default_tree<S: Section>() -> toml::Value {
    toml::Value::try_from(S::default()).expect("config defaults always serialize to TOML")
}

fn kind(v: &toml::Value) -> &'static str {
    match v {
        toml::Value::String(_) => "a string",
        toml::Value::Integer(_) => "an integer",
        toml::Value::Float(_) => "a number",
        toml::Value::Boolean(_) => "a boolean",
        toml::Value::Datetime(_) => "a datetime",
        toml::Value::Array(_) => "an array",
        toml::Value::Table(_) => "a table",
    }
}

fn join(prefix: &str, key: &str) -> String {
    // A key that a dotted path cannot spell (empty, or holding a dot, space or control
    // character: `"" = 1`, `"llc.size_kib" = 1`) is quoted, so the path names it unambiguously.
    let bare = !key.is_empty() && !key.chars().any(|c| c == '.' || c.is_whitespace() || c.is_control());
    let key = if bare { key.to_string() } else { format!("{key:?}") };
    if prefix.is_empty() { key } else { format!("{prefix}.{key}") }
}

/// Merges `layer` onto `base` key by key. Every key of `layer` must exist in `base`
/// (base is always the complete default tree, so this is the unknown-key check).
pub fn merge_layer(base: &mut toml::Value, layer: &toml::Value, prefix: &str) -> Result<(), ConfigError> {
    let (toml::Value::Table(bt), toml::Value::Table(lt)) = (&mut *base, layer) else {
        return Err(ConfigError::new(prefix, format!("expected a table, found {}", kind(layer))));
    };
    for (key, lv) in lt {
        let path = join(prefix, key);
        let Some(bv) = bt.get_mut(key) else {
            let mut known: Vec<&str> = bt.keys().map(|s| s.as_str()).collect();
            known.sort_unstable();
            return Err(ConfigError::new(&path, format!("unknown key; known keys here: {}", known.join(", "))));
        };
        match (&mut *bv, lv) {
            (toml::Value::Table(_), _) => merge_layer(bv, lv, &path)?,
            // An integer where a number is expected is fine: `write_latency_ns = 500`.
            (toml::Value::Float(_), toml::Value::Integer(i)) => *bv = toml::Value::Float(*i as f64),
            (b, l) if std::mem::discriminant(b) == std::mem::discriminant(l) => *b = l.clone(),
            (b, l) => {
                return Err(ConfigError::new(&path, format!("expected {}, found {}", kind(b), kind(l))));
            }
        }
    }
    Ok(())
}

/// The dotted paths of the leaf values (non-table values) a layer sets, appended to `out`.
/// A config load records, per path, the layer that set it last, so that an error found after
/// the merge (a bad enum spelling, a value out of range) can say where the value came from.
pub fn leaf_paths(layer: &toml::Value, prefix: &str, out: &mut Vec<String>) {
    match layer {
        toml::Value::Table(t) => {
            for (key, v) in t {
                leaf_paths(v, &join(prefix, key), out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

/// Parses one `dotted.key=value` override into a one-key layer. The value is read as a TOML
/// value (`32768`, `true`, `1.5`, `"lru"`); a bare word that is not valid TOML is a string.
pub fn parse_override(spec: &str) -> Result<toml::Value, ConfigError> {
    let Some((key, raw)) = spec.split_once('=') else {
        return Err(ConfigError::new("", format!("override '{spec}' is not of the form key=value")));
    };
    let key = key.trim();
    if key.is_empty() || key.split('.').any(|p| p.is_empty()) {
        return Err(ConfigError::new(key, format!("override '{spec}' has an empty key")));
    }
    let raw = raw.trim();
    // TOML integers are signed 64-bit: a larger one (of any length, either sign) would
    // otherwise fall through to a string and be reported as the wrong type.
    let digits = raw.strip_prefix(['-', '+']).unwrap_or(raw);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) && raw.parse::<i64>().is_err() {
        let (what, bound) = if raw.starts_with('-') { ("smaller than the smallest", i64::MIN) } else { ("larger than the largest", i64::MAX) };
        return Err(ConfigError::new(key, format!("{} is {what} value a config takes ({bound})", quote_value(raw))));
    }
    // A number literal beyond f64's range (1e999; not TOML's `inf`) is no TOML float: it too
    // fell through to a string.
    if raw.parse::<f64>().is_ok_and(f64::is_infinite) && !raw.to_ascii_lowercase().contains("inf") {
        return Err(ConfigError::new(key, format!("{} is beyond the largest number a config takes (about 1.8e308)", quote_value(raw))));
    }
    // One TOML value, nothing after it: `1\n[l2]\nsize_kib=1` parses as a document with more
    // keys than `v`, whose extra keys were dropped silently; such a value is a string (and
    // so the wrong type for anything but a string field), as any other non-TOML text is.
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) if t.len() == 1 => t.remove("v").expect("parsed table has key v"),
        _ => toml::Value::String(raw.to_string()),
    };
    let mut layer = value;
    for part in key.rsplit('.') {
        let mut t = toml::Table::new();
        t.insert(part.to_string(), layer);
        layer = toml::Value::Table(t);
    }
    Ok(layer)
}

/// An override's value as quoted in an error: a number of a thousand digits is cut short.
fn quote_value(raw: &str) -> String {
    // By characters, not bytes: slicing at byte 40 would panic inside a multi-byte character
    // (today's callers pass only digits and signs, but nothing here relies on that).
    let chars = raw.chars().count();
    if chars <= 40 { raw.to_string() } else { format!("{}... ({chars} characters)", raw.chars().take(40).collect::<String>()) }
}

/// Parses TOML text as a layer, naming `origin` (a file name or preset) in errors.
pub fn parse_layer(text: &str, origin: &str) -> Result<toml::Value, ConfigError> {
    text.parse::<toml::Table>()
        .map(toml::Value::Table)
        .map_err(|e| ConfigError::new("", format!("{origin}: invalid TOML: {e}")))
}

/// Turns a complete merged tree into the typed section, naming the field on any error.
pub fn finish<S: Section>(tree: toml::Value) -> Result<S, ConfigError> {
    serde_path_to_error::deserialize(tree).map_err(|e| {
        let path = e.path().to_string();
        // One line: toml appends "\nin `field`", which the dotted path already says.
        let msg = e.inner().to_string();
        let msg = msg.lines().next().unwrap_or_default().to_string();
        ConfigError::new(if path == "." { String::new() } else { path }, msg)
    })
}

/// Renders a config as TOML with every field preceded by its description, so a resolved config
/// reads as its own documentation.
pub fn render_commented<S: Section>(value: &S) -> String {
    let tree = toml::Value::try_from(value).expect("config serializes");
    let mut out = String::new();
    render_table(&S::field_docs(), &tree, "", &mut out);
    out
}

fn render_table(docs: &[FieldDoc], tree: &toml::Value, prefix: &str, out: &mut String) {
    let toml::Value::Table(t) = tree else { return };
    for d in docs.iter().filter(|d| d.children.is_none()) {
        if let Some(v) = t.get(d.name) {
            for line in d.description.lines() {
                out.push_str("# ");
                out.push_str(line);
                out.push('\n');
            }
            out.push_str(&format!("{} = {}\n", d.name, v));
        }
    }
    for d in docs.iter().filter(|d| d.children.is_some()) {
        if let Some(v) = t.get(d.name) {
            let path = join(prefix, d.name);
            out.push_str(&format!("\n# {}\n[{}]\n", d.description, path));
            render_table(d.children.as_ref().unwrap(), v, &path, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_quoted_value_is_cut_at_a_character_not_a_byte() {
        assert_eq!(quote_value("12345"), "12345");
        let long = "\u{e9}".repeat(41); // two bytes each: byte 40 is a character boundary, 41 not
        assert_eq!(quote_value(&long), format!("{}... (41 characters)", "\u{e9}".repeat(40)));
        let odd = format!("1{}", "\u{e9}".repeat(45)); // byte 40 falls inside a character
        assert_eq!(quote_value(&odd), format!("1{}... (46 characters)", "\u{e9}".repeat(39)));
    }

    config_enum! {
        /// Test enum.
        pub enum Policy { Lru => "lru": "least recently used", Random => "random": "random victim" }
    }
    config_section! {
        /// Inner.
        pub struct Inner {
            size_kib: u64 = 64 => "Capacity in KiB";
            policy: Policy = Policy::Lru => "Replacement policy";
        }
    }
    config_section! {
        /// Outer.
        pub struct Outer {
            freq_mhz: u64 = 4000 => "Core clock in MHz";
            latency_ns: f64 = 1.5 => "A latency";
            l1: Inner = Inner { size_kib: 32, policy: Policy::Lru } => "First level";
            l2: Inner = Inner::default() => "Second level";
        }
    }

    fn load(layers: &[&str]) -> Result<Outer, ConfigError> {
        let mut tree = default_tree::<Outer>();
        for l in layers {
            merge_layer(&mut tree, &parse_layer(l, "test")?, "")?;
        }
        finish(tree)
    }

    #[test]
    fn missing_fields_keep_the_instance_default_not_the_type_default() {
        let c = load(&["[l1]\npolicy = \"random\""]).unwrap();
        assert_eq!(c.l1.size_kib, 32);
        assert_eq!(c.l1.policy, Policy::Random);
        assert_eq!(c.l2.size_kib, 64);
    }

    #[test]
    fn unknown_key_is_rejected_with_its_dotted_path() {
        let e = load(&["[l1]\nsize_kb = 3"]).unwrap_err();
        assert_eq!(e.field, "l1.size_kb");
        assert!(e.message.contains("size_kib"), "{}", e.message);
    }

    #[test]
    fn an_override_past_i64_says_it_is_too_large_not_a_string() {
        let e = parse_override("workload.stride_bytes=18446744073709551552").unwrap_err();
        assert_eq!(e.field, "workload.stride_bytes");
        assert!(e.message.contains("larger than the largest value"), "{e}");
        assert!(parse_override("workload.stride_bytes=9223372036854775807").is_ok());
        // Negative ones and ones too long for any integer type said "found a string".
        for (spec, says) in [
            ("run.seed=-99999999999999999999999", "smaller than the smallest value a config takes (-9223372036854775808)"),
            ("run.seed=-9223372036854775809", "smaller than the smallest"),
            ("run.seed=+9223372036854775808", "larger than the largest"),
            ("run.seed=1000000000000000000000000000000000000000000000000000", "larger than the largest"),
        ] {
            let e = parse_override(spec).unwrap_err();
            assert_eq!(e.field, "run.seed");
            assert!(e.message.contains(says), "{spec}: {e}");
        }
        assert!(parse_override("run.seed=-9223372036854775808").is_ok());
        // Floats beyond f64 said "found a string" too; TOML's own inf is a number.
        for spec in ["core.ipc=1e999", "core.ipc=-1e400"] {
            let e = parse_override(spec).unwrap_err();
            assert!(e.message.contains("beyond the largest number"), "{spec}: {e}");
        }
        assert_eq!(parse_override("core.ipc=inf").unwrap()["core"]["ipc"].as_float(), Some(f64::INFINITY));
    }

    #[test]
    fn an_override_value_with_more_toml_after_it_is_not_silently_cut_short() {
        // `v = 1\n[l2]\nsize_kib = 1` is a valid TOML document: its [l2] part was dropped.
        let layer = parse_override("l1.size_kib=1\n[l2]\nsize_kib=1").unwrap();
        assert_eq!(layer["l1"]["size_kib"], toml::Value::String("1\n[l2]\nsize_kib=1".into()));
        let e = load_with_override("l1.size_kib=1\n[l2]\nsize_kib=1").unwrap_err();
        assert_eq!(e.field, "l1.size_kib");
        assert!(e.message.contains("expected an integer, found a string"), "{e}");
    }

    fn load_with_override(spec: &str) -> Result<Outer, ConfigError> {
        let mut tree = default_tree::<Outer>();
        merge_layer(&mut tree, &parse_override(spec)?, "")?;
        finish(tree)
    }

    #[test]
    fn a_key_a_dotted_path_cannot_spell_is_quoted_in_the_error() {
        // `"" = 1` gave an error with no field name at all, and `"l1.size_kib" = 1` (one key
        // with a dot in it) was reported as the field l1.size_kib, which exists.
        let e = load(&["\"\" = 1"]).unwrap_err();
        assert_eq!(e.field, "\"\"");
        assert!(e.to_string().starts_with("config field '\"\"': unknown key"), "{e}");
        let e = load(&["\"l1.size_kib\" = 1"]).unwrap_err();
        assert_eq!(e.field, "\"l1.size_kib\"");
        let e = load(&["[l1]\n\"\" = 1"]).unwrap_err();
        assert_eq!(e.field, "l1.\"\"");
        assert_eq!(load(&["[l1]\nsize_kb = 1"]).unwrap_err().field, "l1.size_kb");
        // A control character that is not whitespace (BEL) would print as nothing at all in the
        // error, and a space would read as two words: both are quoted, with the escape shown.
        assert_eq!(load(&["\"a\\u0007b\" = 1"]).unwrap_err().field, "\"a\\u{7}b\"");
        assert_eq!(load(&["\"size kib\" = 1"]).unwrap_err().field, "\"size kib\"");
    }

    #[test]
    fn leaf_paths_lists_every_value_a_layer_sets_by_its_dotted_path() {
        // The config loader records per path which layer set it last: every leaf, tables
        // only as the prefix of their leaves, paths spelled as the merge's errors spell them.
        let layer = parse_layer("freq_mhz = 1\n[l1]\nsize_kib = 2\npolicy = \"lru\"\n[l2]\n\"a.b\" = [1, 2]", "test").unwrap();
        let mut paths = vec!["kept".to_string()];
        leaf_paths(&layer, "", &mut paths);
        paths[1..].sort_unstable();
        assert_eq!(paths, ["kept", "freq_mhz", "l1.policy", "l1.size_kib", "l2.\"a.b\""]);
    }

    #[test]
    fn wrong_type_names_the_field() {
        let e = load(&["freq_mhz = \"fast\""]).unwrap_err();
        assert_eq!(e.field, "freq_mhz");
    }

    #[test]
    fn unknown_enum_value_names_the_field() {
        let e = load(&["[l2]\npolicy = \"fifo\""]).unwrap_err();
        assert_eq!(e.field, "l2.policy");
    }

    #[test]
    fn integer_is_accepted_for_a_float_field() {
        assert_eq!(load(&["latency_ns = 3"]).unwrap().latency_ns, 3.0);
    }

    #[test]
    fn dotted_override_sets_a_nested_field() {
        let mut tree = default_tree::<Outer>();
        merge_layer(&mut tree, &parse_override("l2.size_kib=32768").unwrap(), "").unwrap();
        merge_layer(&mut tree, &parse_override("l2.policy=random").unwrap(), "").unwrap();
        let c: Outer = finish(tree).unwrap();
        assert_eq!(c.l2.size_kib, 32768);
        assert_eq!(c.l2.policy, Policy::Random);
        assert!(parse_override("novalue").is_err());
        assert!(parse_override("a..b=1").is_err());
    }

    #[test]
    fn rendered_config_has_descriptions_and_round_trips() {
        let c = Outer::default();
        let text = render_commented(&c);
        assert!(text.contains("# Core clock in MHz\nfreq_mhz = 4000"));
        assert!(text.contains("[l1]"));
        assert_eq!(load(&[&text]).unwrap(), c);
    }
}
