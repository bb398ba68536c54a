use super::watches::watch_line;
use super::*;

#[test]
fn watch_lines_are_one_json_event_per_line() {
    let line = watch_line("ADDED", &json!({"metadata": {"name": "a"}}));
    let text = std::str::from_utf8(&line).unwrap();
    assert!(text.ends_with('\n'));
    let event: Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(
        event,
        json!({"type": "ADDED", "object": {"metadata": {"name": "a"}}})
    );
}

#[test]
fn query_strings_are_decoded() {
    let query = parse_query(Some("labelSelector=app%20in%20(a%2Cb)&watch=true&x"));
    assert_eq!(query["labelSelector"], "app in (a,b)");
    assert_eq!(query["watch"], "true");
    assert_eq!(query["x"], "");
    assert_eq!(percent_decode("a%2"), "a%2");
}
