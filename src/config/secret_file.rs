//! A secret in a file: a mounted Kubernetes Secret, a Docker secret, a file an operator wrote
//! with `echo`. Every `*_file` setting reads it the same way.

use std::path::Path;

use super::ConfigError;

/// The secret in the file at `path`, for the setting `key`: its content less one final line
/// break (`\n` or `\r\n`, which editors and `echo` add), every other byte kept — a password's
/// spaces may be its own. A file that cannot be read, or holds nothing but that line break, is
/// an error naming `key` and the path (never the content).
pub fn read_secret_file(key: &str, path: &Path) -> Result<String, ConfigError> {
    let content = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new(key, path.display(), format!("cannot read it: {e}")))?;
    let secret = content
        .strip_suffix("\r\n")
        .or_else(|| content.strip_suffix('\n'))
        .unwrap_or(&content);
    if secret.is_empty() {
        return Err(ConfigError::new(key, path.display(), "the file is empty"));
    }
    Ok(secret.to_string())
}

/// A secret setting `key` given as a value or in a file (`{key}_file`): the value when it is
/// not blank, else the file's secret ([`read_secret_file`]), else none.
pub fn secret_setting(
    key: &str,
    value: Option<&str>,
    file: Option<&Path>,
) -> Result<Option<String>, ConfigError> {
    match (value, file) {
        (Some(v), _) if !v.trim().is_empty() => Ok(Some(v.to_string())),
        (_, Some(path)) => read_secret_file(&format!("{key}_file"), path).map(Some),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(content: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), content).unwrap();
        f
    }

    #[test]
    fn a_secret_is_the_content_less_one_final_line_break() {
        for (content, secret) in [
            (" pa ss\n", " pa ss"),
            ("s3cret\r\n", "s3cret"),
            ("k", "k"),
            ("two\n\n", "two\n"),
        ] {
            assert_eq!(
                read_secret_file("x_file", file(content).path()).unwrap(),
                secret
            );
        }
    }

    #[test]
    fn an_empty_or_missing_file_names_the_setting_and_the_path() {
        let empty = read_secret_file("sasl_password_file", file("\n").path()).unwrap_err();
        assert_eq!(empty.key, "sasl_password_file");
        assert!(empty.to_string().contains("empty"), "{empty}");
        let missing = read_secret_file("token_file", Path::new("/no/such/file")).unwrap_err();
        assert_eq!(missing.key, "token_file");
        assert!(missing.to_string().contains("/no/such/file"), "{missing}");
    }

    #[test]
    fn a_secret_setting_is_its_value_then_its_file_then_none() {
        let f = file("from-file\n");
        let setting = |value| secret_setting("audit_key", value, Some(f.path()));
        assert_eq!(setting(Some("given")).unwrap().as_deref(), Some("given"));
        assert_eq!(setting(Some("  ")).unwrap().as_deref(), Some("from-file"));
        assert_eq!(setting(None).unwrap().as_deref(), Some("from-file"));
        assert_eq!(secret_setting("audit_key", None, None).unwrap(), None);
        let missing = secret_setting("audit_key", None, Some(Path::new("/nonexistent/k")));
        assert!(missing.unwrap_err().to_string().contains("audit_key_file"));
    }
}
