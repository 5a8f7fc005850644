//! etcd as `kairos kv bench` runs it: `count` `etcd` members (3.4, the Debian package) on
//! loopback, client and peer URLs on free ports, data under the directory it is given (tmpfs,
//! `/dev/shm`, or the disk); ready once every member's `/v3/maintenance/status` names a leader
//! and a put is answered (through the leader, or a given member). It is spoken to here through
//! its JSON gateway over HTTP/1.1 ([`kairos_peers::http`]).
//!
//! The leader is found by the members' `/v3/maintenance/status`, which names each member's id
//! and the leader's: a member's id is kept with it ([`Member::etcd_id`]) once read.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use kairos_peers::http::{HttpConn, base64};

use super::{Member, PROBE_TIMEOUT, free_ports, loopback};

/// The programs etcd needs, and the Debian package of each.
pub const PROGRAMS: &[(&str, &str)] = &[("etcd", "etcd-server")];

/// The `count` members of a new cluster, each with its data in its own directory under `data`,
/// not started; `log` gives the log of a member from its name (`e0`, `e1`, ...).
pub fn members(count: usize, data: &Path, log: impl Fn(&str) -> PathBuf) -> Result<Vec<Member>> {
    let (ports, _) = free_ports(2 * count, 0)?;
    let (client, peer) = ports.split_at(count);
    let cluster: Vec<String> = (0..count).map(|i| format!("e{i}=http://127.0.0.1:{}", peer[i])).collect();
    (0..count)
        .map(|i| {
            let client_url = format!("http://127.0.0.1:{}", client[i]);
            let peer_url = format!("http://127.0.0.1:{}", peer[i]);
            let mut args: Vec<OsString> = [
                "--name",
                &format!("e{i}"),
                "--listen-client-urls",
                &client_url,
                "--advertise-client-urls",
                &client_url,
                "--listen-peer-urls",
                &peer_url,
                "--initial-advertise-peer-urls",
                &peer_url,
                "--initial-cluster",
                &cluster.join(","),
                "--initial-cluster-state",
                "new",
                "--initial-cluster-token",
                "kairos-kv-bench",
                "--logger",
                "zap",
                "--log-level",
                "error",
            ]
            .into_iter()
            .map(OsString::from)
            .collect();
            args.push("--data-dir".into());
            args.push(data.join(format!("e{i}")).into_os_string());
            Ok(Member::new(
                format!("etcd member {i}"),
                "etcd".into(),
                args,
                log(&format!("e{i}")),
                loopback(client[i]),
            ))
        })
        .collect()
}

/// One write probe through the member at `addr`: a put and a range of the same key answered.
pub fn probe(addr: SocketAddr) -> Result<()> {
    let mut conn = HttpConn::connect(addr, PROBE_TIMEOUT)?;
    let put = format!("{{\"key\":\"{}\",\"value\":\"{}\"}}", base64(b"ready"), base64(b"1"));
    let r = conn.post("/v3/kv/put", put.as_bytes())?;
    if r.status != 200 {
        bail!("put answered {}: {}", r.status, String::from_utf8_lossy(&r.body));
    }
    let r = conn.post("/v3/kv/range", format!("{{\"key\":\"{}\"}}", base64(b"ready")).as_bytes())?;
    if r.status != 200 {
        bail!("range answered {}", r.status);
    }
    Ok(())
}

/// The leader's index among `members`, as the live members' statuses name it; each live
/// member's id is noted on the way.
pub fn leader(members: &mut [Member]) -> Result<usize> {
    let live: Vec<usize> = (0..members.len()).filter(|&i| members[i].is_live()).collect();
    let mut leader_id = None;
    for i in live {
        let Ok((member, leader)) = status(members[i].client) else { continue };
        members[i].etcd_id = Some(member);
        if leader != "0" {
            leader_id = Some(leader);
        }
    }
    let leader_id = leader_id.ok_or_else(|| anyhow!("no etcd member names a leader"))?;
    members
        .iter()
        .position(|m| m.is_live() && m.etcd_id.as_deref() == Some(leader_id.as_str()))
        .ok_or_else(|| anyhow!("the leader etcd names ({leader_id}) is not a live member yet"))
}

/// Whether the member at `addr`, asked now, names a leader, and not the one whose id is `old`.
pub fn sees_new_leader(addr: SocketAddr, old: Option<&str>) -> bool {
    status(addr).is_ok_and(|(_, leader)| leader != "0" && Some(leader.as_str()) != old)
}

/// An etcd member's status: its own id and the leader's (`"0"` for none).
pub fn status(addr: SocketAddr) -> Result<(String, String)> {
    let mut conn = HttpConn::connect(addr, PROBE_TIMEOUT)?;
    let r = conn.post("/v3/maintenance/status", b"{}")?;
    if r.status != 200 {
        bail!("status answered {}", r.status);
    }
    let v: serde_json::Value = serde_json::from_slice(&r.body).context("status is not JSON")?;
    let member = v["header"]["member_id"].as_str().ok_or_else(|| anyhow!("status without member_id"))?;
    let leader = v["leader"].as_str().unwrap_or("0");
    Ok((member.to_string(), leader.to_string()))
}
