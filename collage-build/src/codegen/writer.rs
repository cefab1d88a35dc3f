//! [`CWriter`]: C source built a line at a time, with the indentation of the blocks it is in.

/// One level of indentation.
const INDENT: &str = "    ";

/// C source under construction: the text so far and the depth of the block being written.
///
/// [`line`](Self::line) writes a line at the current depth; [`open`](Self::open) and
/// [`close`](Self::close) write a block's first and last lines and indent the lines between
/// them:
///
/// ```
/// # use collage_build::codegen::writer::CWriter;
/// let mut w = CWriter::new();
/// w.open("for (int64_t i = 0; i < n; ++i) {");
/// w.line("x[i] = 0;");
/// w.close("}");
/// assert_eq!(w.into_string(), "for (int64_t i = 0; i < n; ++i) {\n    x[i] = 0;\n}\n");
/// ```
#[derive(Debug, Default)]
pub struct CWriter {
    text: String,
    depth: usize,
}

impl CWriter {
    /// An empty writer, outside any block.
    pub fn new() -> CWriter {
        CWriter::default()
    }

    /// Writes `s`, one line without its newline, at the current depth (an empty line is not
    /// indented).
    pub fn line(&mut self, s: impl AsRef<str>) {
        let s = s.as_ref();
        debug_assert!(!s.contains('\n'), "one line at a time: {s:?}");
        if !s.is_empty() {
            for _ in 0..self.depth {
                self.text.push_str(INDENT);
            }
            self.text.push_str(s);
        }
        self.text.push('\n');
    }

    /// Writes `head`, a block's first line (`for (..) {`), and indents the lines after it.
    pub fn open(&mut self, head: impl AsRef<str>) {
        self.line(head);
        self.depth += 1;
    }

    /// Ends the innermost block with its last line `tail` (`}`), one level out.
    pub fn close(&mut self, tail: impl AsRef<str>) {
        self.depth = self.depth.checked_sub(1).expect("a block to close");
        self.line(tail);
    }

    /// Writes `s` one level out, between two blocks at the current depth (`} else {`).
    pub fn reopen(&mut self, s: impl AsRef<str>) {
        self.close(s);
        self.depth += 1;
    }

    /// Runs `body` one level deeper, without braces: the statement of a `for` or `if` line.
    pub fn indented(&mut self, body: impl FnOnce(&mut CWriter)) {
        self.depth += 1;
        body(self);
        self.depth -= 1;
    }

    /// Appends `s` as it is: pre-formatted text (a prelude, a preprocessor line), which should
    /// end in a newline.
    pub fn raw(&mut self, s: &str) {
        self.text.push_str(s);
    }

    /// The text so far, for code that appends to a `String` itself (a backend's
    /// [`WindowCalls`](crate::backend::WindowCalls)): whole lines, indented as they are.
    pub fn text_mut(&mut self) -> &mut String {
        &mut self.text
    }

    /// The text written; every block must have been closed.
    pub fn into_string(self) -> String {
        debug_assert_eq!(self.depth, 0, "a block left open");
        self.text
    }
}
