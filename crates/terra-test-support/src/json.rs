//! Reading the JSON terra prints.

use serde_json::Value;

/// The string `field` of every object in the array `array`; fails when
/// `array` is not an array or an element has no such string.
pub fn field_strs<'a>(array: &'a Value, field: &str) -> Vec<&'a str> {
    array
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {array}"))
        .iter()
        .map(|e| {
            e[field]
                .as_str()
                .unwrap_or_else(|| panic!("no string {field:?} in {e}"))
        })
        .collect()
}
