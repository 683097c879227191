//! Groups as the control plane shows and changes them: `GET /v1/groups[/{name}]` and
//! `PATCH /v1/groups/{name}` (weight, caps, reservation, class, parent), each change
//! recorded in the state file before it is applied.

use super::api::*;
use super::context::{check_caps, check_reserve, check_weight, parent_of, Control};
use super::error::ApiError;
use super::state::RuntimeState;
use crate::config::ROOT_GROUP;
use crate::lock::Locked;

impl Control {
    fn group_view(&self, st: &RuntimeState, info: &crate::qos::NodeInfo) -> GroupView {
        let cfg_weight = self
            .config()
            .groups
            .iter()
            .find(|g| g.name == info.name)
            .map(|g| g.weight)
            .unwrap_or(info.weight);
        let o = st.groups.get(&info.name);
        GroupView {
            name: info.name.clone(),
            weight: Sourced {
                value: info.weight,
                source: Sourced::pick(cfg_weight, o.and_then(|o| o.weight)).source,
            },
            caps: Sourced::new(
                info.caps.unwrap_or_default(),
                o.is_some_and(|o| o.caps.is_some()),
            ),
            reserve: Sourced::new(
                info.reserve.unwrap_or_default(),
                o.is_some_and(|o| o.reserve.is_some()),
            ),
            class: Sourced::new(info.class, o.is_some_and(|o| o.class.is_some())),
            latency_target: Sourced::new(
                info.latency_target,
                o.is_some_and(|o| o.latency_target.is_some()),
            ),
            boost: info.boost,
            parent: info.parent.clone().unwrap_or_else(|| ROOT_GROUP.into()),
            volumes: self
                .qos
                .volumes()
                .into_iter()
                .filter(|v| v.parent.as_deref() == Some(info.name.as_str()))
                .map(|v| v.name)
                .collect(),
        }
    }

    pub fn groups(&self) -> GroupList {
        let st = self.state.locked();
        GroupList {
            groups: self
                .qos
                .groups()
                .iter()
                .map(|g| self.group_view(&st, g))
                .collect(),
        }
    }

    pub fn group(&self, name: &str) -> Result<GroupView, ApiError> {
        let st = self.state.locked();
        self.qos
            .groups()
            .iter()
            .find(|g| g.name == name)
            .map(|g| self.group_view(&st, g))
            .ok_or_else(|| ApiError::not_found(format!("no group named {name:?}")))
    }

    pub fn patch_group(&self, name: &str, patch: GroupPatch) -> Result<GroupView, ApiError> {
        let current = self.group(name)?;
        if let Some(w) = patch.weight {
            check_weight(w)?;
        }
        if let Some(caps) = &patch.caps {
            check_caps(caps)?;
        }
        if let Some(r) = &patch.reserve {
            check_reserve(r)?;
        }
        // Refused before anything changes: the other settings of the patch are applied
        // one by one.
        if patch.class == Some(crate::qos::Class::Latency)
            && patch.latency_target.is_none()
            && current.latency_target.value.is_none()
        {
            return Err(ApiError::field(
                "latency_target",
                format!("class \"latency\" of {name:?} needs a target, e.g. \"p99 2ms\""),
            ));
        }
        if patch.weight.is_none()
            && patch.caps.is_none()
            && patch.reserve.is_none()
            && patch.class.is_none()
            && patch.latency_target.is_none()
            && patch.parent.is_none()
        {
            return self.group(name);
        }
        // A move is checked as the config would be (unknown parent, a cycle).
        let _changing = self.begin_config_change();
        let mut next = (*self.config()).clone();
        if let Some(parent) = &patch.parent {
            if let Some(g) = next.groups.iter_mut().find(|g| g.name == name) {
                g.parent = Some(parent.clone()).filter(|p| p != ROOT_GROUP);
            }
            next.validate().map_err(|e| match e {
                crate::config::ConfigError::Invalid { message, .. } => {
                    ApiError::field("parent", message)
                }
                other => ApiError::field("parent", other),
            })?;
        }
        self.commit(
            |s| {
                let o = s.groups.entry(name.to_owned()).or_default();
                o.parent = patch.parent.clone().or(o.parent.take());
                o.weight = patch.weight.or(o.weight);
                o.caps = patch.caps.or(o.caps);
                o.reserve = patch.reserve.or(o.reserve);
                o.class = patch.class.or(o.class);
                o.latency_target = patch.latency_target.or(o.latency_target);
            },
            || {
                if let Some(r) = &patch.reserve {
                    // First: the one refusal left after validation (409).
                    self.qos
                        .set_reserve(name, Some(r))
                        .map_err(ApiError::from_qos)?;
                }
                if let Some(caps) = &patch.caps {
                    self.qos
                        .set_caps(name, Some(caps))
                        .map_err(|e| ApiError::body(e.to_string()))?;
                }
                if let Some(w) = patch.weight {
                    self.qos
                        .set_weight(name, w)
                        .map_err(|e| ApiError::field("weight", e))?;
                }
                if patch.class.is_some() || patch.latency_target.is_some() {
                    self.qos
                        .set_group_class(name, patch.class, patch.latency_target)
                        .map_err(ApiError::from_qos)?;
                }
                if let Some(parent) = &patch.parent {
                    let parent = parent_of(parent);
                    self.qos
                        .move_group(name, parent)
                        .map_err(|e| ApiError::field("parent", e))?;
                }
                Ok(())
            },
        )?;
        self.set_config(next);
        tracing::info!(group = %name, ?patch, "control: group changed");
        self.group(name)
    }

    // ----- volumes -----
}
