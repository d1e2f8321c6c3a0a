//! [`Source`]: what a charge paid for (an MCP server's tools, or a model of
//! an LLM provider), so day and month totals can be shown per source.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

/// What a charge paid for. Day and month totals are kept per source beside
/// the totals the caps count; the caps never look at them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// Tool calls of one MCP server (`mcp.servers[].id`).
    Mcp {
        /// The server's id.
        server: String,
    },
    /// Calls to one model of one LLM provider (`llm.providers[].id`).
    Llm {
        /// The provider's id.
        provider: String,
        /// The model's exact name.
        model: String,
    },
}

impl Source {
    /// The source as one string that cannot be mistaken for another's
    /// (a JSON array: ids and model names may hold any character), for a
    /// Redis hash field.
    pub(crate) fn field(&self) -> String {
        let parts: Vec<&str> = match self {
            Source::Mcp { server } => vec!["mcp", server],
            Source::Llm { provider, model } => vec!["llm", provider, model],
        };
        serde_json::Value::from(parts).to_string()
    }

    /// The source a [`field`](Source::field) names, if it names one.
    pub(crate) fn from_field(field: &str) -> Option<Source> {
        let parts: Vec<String> = serde_json::from_str(field).ok()?;
        match parts.as_slice() {
            [kind, server] if kind == "mcp" => Some(Source::Mcp {
                server: server.clone(),
            }),
            [kind, provider, model] if kind == "llm" => Some(Source::Llm {
                provider: provider.clone(),
                model: model.clone(),
            }),
            _ => None,
        }
    }
}

/// What one source (or the unattributed rest) was charged on one UTC day
/// and in its month.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceTotals {
    /// The UTC day's total.
    pub day: Decimal,
    /// The UTC month's total.
    pub month: Decimal,
}

/// The day and month totals of every source charged this month, and what
/// is left of the totals that no source accounts for.
pub(crate) fn by_source(
    day: BTreeMap<Source, Decimal>,
    month: BTreeMap<Source, Decimal>,
    totals: SourceTotals,
) -> (BTreeMap<Source, SourceTotals>, SourceTotals) {
    let mut sources: BTreeMap<Source, SourceTotals> = BTreeMap::new();
    for (source, usd) in month {
        sources.entry(source).or_default().month = usd;
    }
    for (source, usd) in day {
        sources.entry(source).or_default().day = usd;
    }
    let sum = |part: fn(&SourceTotals) -> Decimal| sources.values().map(part).sum::<Decimal>();
    // Charges made before totals were kept per source (or by a constle
    // that did not keep them) belong to no source.
    let unattributed = SourceTotals {
        day: (totals.day - sum(|t| t.day)).max(Decimal::ZERO),
        month: (totals.month - sum(|t| t.month)).max(Decimal::ZERO),
    };
    (sources, unattributed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_whatever_the_names_hold() {
        for source in [
            Source::Mcp {
                server: "accounting".into(),
            },
            Source::Llm {
                provider: "a:b".into(),
                model: "llama3:8b\"]".into(),
            },
        ] {
            assert_eq!(Source::from_field(&source.field()), Some(source));
        }
        let mcp = Source::Mcp { server: "x".into() }.field();
        assert_eq!(mcp, r#"["mcp","x"]"#);
        for bad in [
            "",
            "[]",
            r#"["mcp"]"#,
            r#"["llm","p"]"#,
            r#"["x","y"]"#,
            "mcp:x",
        ] {
            assert_eq!(Source::from_field(bad), None, "{bad}");
        }
    }

    #[test]
    fn what_no_source_accounts_for_is_unattributed() {
        let s = |name: &str| Source::Mcp {
            server: name.into(),
        };
        let (sources, rest) = by_source(
            BTreeMap::from([(s("a"), Decimal::ONE)]),
            BTreeMap::from([(s("a"), Decimal::TWO), (s("b"), Decimal::ONE)]),
            SourceTotals {
                day: Decimal::TEN,
                month: Decimal::TEN,
            },
        );
        assert_eq!(sources[&s("b")].day, Decimal::ZERO);
        assert_eq!(sources[&s("a")].month, Decimal::TWO);
        assert_eq!(rest.day, Decimal::from(9));
        assert_eq!(rest.month, Decimal::from(7));
    }
}
