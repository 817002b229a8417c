//! Where `send` and `events write` get their messages: the arguments, else the lines of a
//! file or of stdin.

use std::io::BufRead;
use std::path::Path;

use crate::error::CtlError;

/// `args` when given, else the non-blank lines of `file` (`-` or none: stdin).
pub fn lines(args: &[String], file: Option<&Path>) -> Result<Vec<String>, CtlError> {
    if !args.is_empty() {
        return match file {
            Some(_) => Err(CtlError::Usage(
                "give the input as arguments or with --file, not both".into(),
            )),
            None => Ok(args.to_vec()),
        };
    }
    let read_error = |source| CtlError::Io {
        what: "read",
        path: file.map_or_else(|| "stdin".into(), Path::to_path_buf),
        source,
    };
    let reader: Box<dyn BufRead> = match file {
        Some(path) if path.as_os_str() != "-" => Box::new(std::io::BufReader::new(
            std::fs::File::open(path).map_err(read_error)?,
        )),
        _ => Box::new(std::io::stdin().lock()),
    };
    let all = reader
        .lines()
        .collect::<Result<Vec<_>, _>>()
        .map_err(read_error)?;
    Ok(all.into_iter().filter(|l| !l.trim().is_empty()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_or_file_lines() {
        assert_eq!(lines(&["a".into()], None).unwrap(), ["a"]);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("in.txt");
        std::fs::write(&path, "one\n\n  \ntwo\n").unwrap();
        assert_eq!(lines(&[], Some(&path)).unwrap(), ["one", "two"]);
        assert!(matches!(
            lines(&["a".into()], Some(&path)),
            Err(CtlError::Usage(_))
        ));
        let missing = dir.path().join("missing");
        assert!(matches!(
            lines(&[], Some(&missing)),
            Err(CtlError::Io { .. })
        ));
    }
}
