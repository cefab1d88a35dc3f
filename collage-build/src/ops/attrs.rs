//! Operator attributes, independent of the frontend.
use std::collections::BTreeMap;

use crate::error::OpError;
use crate::tensor::Tensor;

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f32),
    /// A string.
    Str(String),
    /// Integers.
    Ints(Vec<i64>),
    /// Floats.
    Floats(Vec<f32>),
    /// Strings.
    Strs(Vec<String>),
    /// A tensor.
    Tensor(Tensor),
}

/// Named attributes of one node.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Attrs(pub BTreeMap<String, Attr>);

impl Attrs {
    /// True if the attribute is present.
    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn wrong(name: &str, want: &str, got: &Attr) -> OpError {
        OpError::expected(
            format!("attribute `{name}` to be {want}"),
            format!("{got:?}"),
        )
    }

    /// An integer attribute or its default.
    pub fn int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(a) => Err(Self::wrong(name, "an integer", a)),
        }
    }

    /// An optional integer attribute.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, OpError> {
        if self.has(name) {
            self.int(name, 0).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A float attribute or its default.
    pub fn float(&self, name: &str, default: f32) -> Result<f32, OpError> {
        match self.0.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f32),
            Some(a) => Err(Self::wrong(name, "a float", a)),
        }
    }

    /// An optional float attribute.
    pub fn opt_float(&self, name: &str) -> Result<Option<f32>, OpError> {
        if self.has(name) {
            self.float(name, 0.0).map(Some)
        } else {
            Ok(None)
        }
    }

    /// A string attribute or its default.
    pub fn string(&self, name: &str, default: &str) -> Result<String, OpError> {
        match self.0.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::Str(v)) => Ok(v.clone()),
            Some(a) => Err(Self::wrong(name, "a string", a)),
        }
    }

    /// An integer-list attribute, if present.
    pub fn ints(&self, name: &str) -> Result<Option<Vec<i64>>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(Attr::Int(v)) => Ok(Some(vec![*v])),
            Some(a) => Err(Self::wrong(name, "a list of integers", a)),
        }
    }

    /// A float-list attribute, if present.
    pub fn floats(&self, name: &str) -> Result<Option<Vec<f32>>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Floats(v)) => Ok(Some(v.clone())),
            Some(Attr::Float(v)) => Ok(Some(vec![*v])),
            Some(a) => Err(Self::wrong(name, "a list of floats", a)),
        }
    }

    /// A tensor attribute, if present.
    pub fn tensor(&self, name: &str) -> Result<Option<&Tensor>, OpError> {
        match self.0.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(a) => Err(Self::wrong(name, "a tensor", a)),
        }
    }
}
