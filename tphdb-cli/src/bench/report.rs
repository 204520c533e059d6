//! The shared shape of benchmark output: a terminal table and a JSON file
//! `{"workload", "params", "results": [{"engine", ...}]}`.

use std::path::Path;

use serde_json::{json, Map, Value};

pub struct Report {
    workload: String,
    params: Map<String, Value>,
    results: Vec<Map<String, Value>>,
}

impl Report {
    pub fn new(workload: &str) -> Self {
        Report {
            workload: workload.to_string(),
            params: Map::new(),
            results: Vec::new(),
        }
    }

    pub fn param(&mut self, name: &str, value: impl Into<Value>) {
        self.params.insert(name.to_string(), value.into());
    }

    /// Adds a result row; `fields` are (name, value) pairs after `engine`.
    pub fn result(&mut self, engine: &str, fields: Vec<(&str, Value)>) {
        let mut row = Map::new();
        row.insert("engine".into(), json!(engine));
        for (k, v) in fields {
            row.insert(k.to_string(), v);
        }
        self.results.push(row);
    }

    /// Adds a result row as it is.
    pub fn push(&mut self, row: Map<String, Value>) {
        self.results.push(row);
    }

    pub fn rows(&self) -> &[Map<String, Value>] {
        &self.results
    }

    pub fn to_json(&self) -> Value {
        json!({
            "workload": self.workload,
            "params": self.params,
            "results": self.results,
        })
    }

    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        let s = serde_json::to_string_pretty(&self.to_json())?;
        std::fs::write(path, s + "\n")
    }

    /// Prints the results as an aligned table, columns in first-seen order.
    /// Arrays, objects and multi-line strings are left to the JSON.
    pub fn print_table(&self) {
        let mut cols: Vec<String> = vec!["engine".into()];
        for r in &self.results {
            for (k, v) in r {
                let tabular = match v {
                    Value::Array(_) | Value::Object(_) => false,
                    Value::String(s) => !s.contains('\n'),
                    _ => true,
                };
                if tabular && !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
        self.print_columns(&cols);
    }

    /// Prints the results as an aligned table of the given columns.
    pub fn print_columns<S: AsRef<str>>(&self, cols: &[S]) {
        let cols: Vec<String> = cols.iter().map(|c| c.as_ref().to_string()).collect();
        let cell = |v: Option<&Value>| match v {
            None | Some(Value::Null) => "-".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(f) if n.is_f64() => format_float(f),
                _ => n.to_string(),
            },
            Some(v) => v.to_string(),
        };
        let rows: Vec<Vec<String>> = self
            .results
            .iter()
            .map(|r| cols.iter().map(|c| cell(r.get(c))).collect())
            .collect();
        let widths: Vec<usize> = (0..cols.len())
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .chain([cols[i].len()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let line = |cells: &[String]| {
            cells
                .iter()
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 {
                        format!("{c:<w$}")
                    } else {
                        format!("{c:>w$}")
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        };
        println!("{}", line(&cols));
        for r in &rows {
            println!("{}", line(r));
        }
    }
}

fn format_float(f: f64) -> String {
    if f.abs() >= 1000.0 {
        format!("{f:.0}")
    } else if f.abs() >= 10.0 {
        format!("{f:.1}")
    } else {
        format!("{f:.3}")
    }
}

/// Rounds for JSON output so files stay readable.
pub fn round(f: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (f * p).round() / p
}
