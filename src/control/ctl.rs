//! `vhost-iocost ctl`: the command-line client of the control API.
//!
//! The socket is `--socket`, else the `[control] socket` of `--config FILE`, else the
//! environment variable `VHOST_IOCOST_SOCKET`. Read commands print tables, or the API's
//! JSON with `--json`. `top` redraws a table every second (like `iocost_monitor`) until
//! Ctrl-C; with `--once` it prints one frame and exits (for scripts and pipes).

pub use super::ctl_args::{CtlArgs, CtlCommand, SOCKET_ENV};
use super::ctl_commands::{self as cmd, Api};
use crate::config::Config;
use std::path::PathBuf;

fn socket_path(args: &CtlArgs) -> Result<PathBuf, String> {
    if let Some(s) = &args.socket {
        return Ok(s.clone());
    }
    if let Some(c) = &args.config {
        let config = Config::load(c).map_err(|e| e.to_string())?;
        return config
            .control
            .socket
            .ok_or_else(|| format!("{}: no [control] socket is configured", c.display()));
    }
    match std::env::var_os(SOCKET_ENV) {
        Some(s) if !s.is_empty() => Ok(PathBuf::from(s)),
        _ => Err(format!(
            "no control socket: give --socket PATH, --config FILE or set {SOCKET_ENV}"
        )),
    }
}

/// Run a ctl command.
pub fn run(args: &CtlArgs) -> Result<(), String> {
    let api = Api {
        socket: socket_path(args)?,
    };
    let json = args.json;
    match &args.command {
        CtlCommand::Volumes => cmd::volumes(&api, json),
        CtlCommand::Groups => cmd::groups(&api, json),
        CtlCommand::AddVolume(a) => cmd::add_volume(&api, json, a),
        CtlCommand::RemoveVolume { name, force } => cmd::remove_volume(&api, name, *force),
        CtlCommand::Resize { name, size } => cmd::resize(&api, json, name, size),
        CtlCommand::AddGroup {
            name,
            parent,
            weight,
        } => cmd::add_group(&api, json, name, parent.as_deref(), *weight),
        CtlCommand::RemoveGroup { name } => cmd::remove_group(&api, name),
        CtlCommand::SetWeight { name, weight } => cmd::set_weight(&api, json, name, *weight),
        CtlCommand::SetCaps { name, limits } => cmd::set_caps(&api, json, name, limits),
        CtlCommand::SetClass {
            name,
            class,
            target,
        } => cmd::set_class(&api, json, name, class, target.as_deref()),
        CtlCommand::SetReserve { name, values } => cmd::set_reserve(&api, json, name, values),
        CtlCommand::Reset { name } => cmd::reset(&api, json, name),
        CtlCommand::Qos(a) => cmd::qos(&api, json, a),
        CtlCommand::Stats => cmd::stats(&api, json),
        CtlCommand::Top { once, interval } => cmd::top(&api, *once, *interval, json),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_resolution_order() {
        let args = |socket: Option<&str>, config: Option<PathBuf>| CtlArgs {
            socket: socket.map(PathBuf::from),
            config,
            json: false,
            command: CtlCommand::Volumes,
        };
        assert_eq!(
            socket_path(&args(Some("/a.sock"), None)).unwrap(),
            PathBuf::from("/a.sock")
        );
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("c.toml");
        std::fs::write(
            &cfg,
            "[device]\nkind = \"null\"\n[control]\nsocket = \"/run/x.sock\"\n\
             [[volume]]\nname = \"v\"\nsocket = \"v.sock\"\nsize = \"1MiB\"\n",
        )
        .unwrap();
        assert_eq!(
            socket_path(&args(None, Some(cfg))).unwrap(),
            PathBuf::from("/run/x.sock")
        );
        assert_eq!(crate::control::client::encode_segment("a b/c"), "a%20b%2Fc");
    }
}
