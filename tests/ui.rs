//! Compile-fail tests: DSL errors carry spans, and a wrong input shape does not compile.
#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
