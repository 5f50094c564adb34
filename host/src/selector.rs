//! Label selectors as Kubernetes writes them (`a=b,c!=d,e in (x,y),!f`): the pure grammar check, shared by the config and the Kubernetes client.

use crate::model::is_dns_subdomain;

/// Checks `selector` against the Kubernetes label selector grammar, so a typo in the config is
/// reported at start with the requirement it concerns, not as a watch that fails later.
pub fn check(selector: &str) -> Result<(), String> {
    for req in split(selector)? {
        requirement(req.trim())?;
    }
    Ok(())
}

/// Splits on commas outside parentheses.
pub(crate) fn split(s: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err("unbalanced parentheses".into());
        }
    }
    if depth != 0 {
        return Err("unbalanced parentheses".into());
    }
    out.push(&s[start..]);
    Ok(out)
}

fn requirement(r: &str) -> Result<(), String> {
    if r.is_empty() {
        return Err("an empty requirement (two commas, or a trailing comma)".into());
    }
    if let Some(key) = r.strip_prefix('!') {
        return label_key(key.trim());
    }
    for op in ["!=", "==", "="] {
        if let Some((k, v)) = r.split_once(op) {
            label_key(k.trim())?;
            return label_value(v.trim());
        }
    }
    let words: Vec<&str> = r.splitn(2, char::is_whitespace).collect();
    if let [key, rest] = words[..] {
        let rest = rest.trim_start();
        let set = rest
            .strip_prefix("notin")
            .or_else(|| rest.strip_prefix("in"))
            .ok_or_else(|| format!("`{r}`: expected `=`, `!=`, `in (…)` or `notin (…)` after `{key}`"))?;
        label_key(key)?;
        let inner = set
            .trim()
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("`{r}`: the values of `in`/`notin` go in parentheses: `{key} in (a,b)`"))?;
        for v in inner.split(',') {
            label_value(v.trim())?;
        }
        return Ok(());
    }
    label_key(r)
}

fn label_key(k: &str) -> Result<(), String> {
    let (prefix, name) = match k.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if prefix.is_some_and(|p| !is_dns_subdomain(p)) {
        return Err(format!("`{k}`: the key's prefix must be a DNS subdomain"));
    }
    if !is_label_value(name) || name.is_empty() {
        return Err(format!("`{k}` is not a label key (letters, digits, '-', '_', '.', at most 63)"));
    }
    Ok(())
}

fn label_value(v: &str) -> Result<(), String> {
    if is_label_value(v) { Ok(()) } else { Err(format!("`{v}` is not a label value")) }
}

fn is_label_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && v.chars().next().is_none_or(|c| c.is_ascii_alphanumeric())
        && v.chars().last().is_none_or(|c| c.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn the_kubernetes_forms_are_accepted() {
        for s in ["shard=a", "shard==a", "tier!=db", "env in (prod, staging)", "env notin (dev)", "team", "!legacy"] {
            check(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        }
        check("app.kubernetes.io/part-of=steward,shard in (a,b),!skip").unwrap();
    }

    #[test]
    fn mistakes_name_the_requirement() {
        assert!(check("a in b").unwrap_err().contains("parentheses"));
        assert!(check("shard=a,").unwrap_err().contains("empty requirement"));
        assert!(check("Bad Key=x").unwrap_err().contains("Bad Key"));
        assert!(check("a=(x").unwrap_err().contains("parentheses"));
        assert!(check("a=-x").unwrap_err().contains("-x"));
    }
}
