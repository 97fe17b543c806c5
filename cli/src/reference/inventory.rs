//! What the reference driver's storage holds, read from its volumes
//! directory: the storage, not the journal, is the inventory (a controller
//! started on a new state directory finds the volumes an earlier one made).
//!
//! A block volume is `<id>.img`, its size the image's; a dir volume is
//! `<id>/`, its size nominal (reported as 0, unknown, unless the journal
//! recorded what was promised). Snapshots are the records `<id>.json` in the
//! snapshots directory. Listings run in id order; a page's token is the
//! id it starts at, so a token stays good when the volume it names is
//! deleted meanwhile.

use volplane_core::driver::{
    Attributes, Snapshot, SnapshotPage, StoredVolume, Timestamp, Volume, VolumePage,
};
use volplane_core::{Code, Status};
use volplane_service::{NodeHost, SnapshotQuery, host_status};

use super::snapshot::{MAX_RECORD, is_snapshot_id, parse_record};
use super::{KIND, Kind, Reference, is_volume_id};

/// The page of `ids` (sorted) starting at `token` (an id of the form
/// `valid` accepts, or empty), at most `max` long (0: all), and the token
/// of the next.
fn page(
    ids: Vec<String>,
    token: &str,
    max: u32,
    valid: fn(&str) -> bool,
) -> Result<(Vec<String>, String), Status> {
    if !token.is_empty() && !valid(token) {
        return Err(Status::new(
            Code::Aborted,
            format!(
                "starting_token {token:?} was not handed out by this driver; list again from the start"
            ),
        ));
    }
    let mut rest = ids.into_iter().filter(|id| id.as_str() >= token);
    let limit = if max == 0 { usize::MAX } else { max as usize };
    let entries: Vec<String> = rest.by_ref().take(limit).collect();
    Ok((entries, rest.next().unwrap_or_default()))
}

impl Reference {
    /// The volume `id` as the volumes directory holds it.
    pub(super) async fn stored_volume(
        &self,
        host: &NodeHost,
        id: &str,
    ) -> Result<Option<StoredVolume>, Status> {
        if !is_volume_id(id) {
            return Ok(None);
        }
        let (image, dir) = (self.image(id), self.dir(id));
        let found = host
            .run(move |h| -> volplane_host::Result<Option<(Kind, u64)>> {
                if let Some(size) = h.file_size(&image)? {
                    return Ok(Some((Kind::Block, size)));
                }
                Ok(match h.open_existing(&dir)? {
                    Some(d) if d.stat()?.is_dir() => Some((Kind::Dir, 0)),
                    _ => None,
                })
            })
            .await
            .map_err(|e| host_status(&format!("look up volume {id}"), e))?;
        Ok(found.map(|(kind, size)| {
            let kind_name = match kind {
                Kind::Block => "block",
                Kind::Dir => "dir",
            };
            StoredVolume::new(Volume {
                volume_id: id.to_string(),
                capacity_bytes: size,
                volume_context: Attributes::from([(KIND.to_string(), kind_name.to_string())]),
                accessible_topology: vec![self.topology()],
                content_source: None,
            })
        }))
    }

    /// A page of the volumes directory's volumes.
    pub(super) async fn volume_page(
        &self,
        host: &NodeHost,
        token: &str,
        max: u32,
    ) -> Result<VolumePage, Status> {
        let dir = self.volumes_dir.clone();
        let names = host
            .run(move |h| h.entries(&dir))
            .await
            .map_err(|e| host_status("ListVolumes", e))?;
        let mut ids: Vec<String> = names
            .into_iter()
            .map(|n| n.strip_suffix(".img").map(str::to_string).unwrap_or(n))
            .filter(|id| is_volume_id(id))
            .collect();
        ids.sort();
        ids.dedup();
        let (ids, next_token) = page(ids, token, max, is_volume_id)?;
        let mut entries = Vec::with_capacity(ids.len());
        for id in ids {
            // One deleted while the page is read is left out.
            if let Some(v) = self.stored_volume(host, &id).await? {
                entries.push(v);
            }
        }
        Ok(VolumePage {
            entries,
            next_token,
        })
    }

    /// Snapshot `id` as its record says.
    pub(super) async fn stored_snapshot(
        &self,
        host: &NodeHost,
        id: &str,
    ) -> Result<Option<Snapshot>, Status> {
        if !is_snapshot_id(id) {
            return Ok(None);
        }
        let path = self.snapshot_record(id);
        let record = host
            .run(move |h| -> volplane_host::Result<_> {
                match h.read_small(&path, MAX_RECORD)? {
                    Some(bytes) => parse_record(&path, &bytes).map(Some),
                    None => Ok(None),
                }
            })
            .await
            .map_err(|e| host_status(&format!("look up snapshot {id}"), e))?;
        Ok(record.map(|r| Snapshot {
            snapshot_id: id.to_string(),
            source_volume_id: r.source_volume_id,
            size_bytes: r.size_bytes,
            creation_time: Timestamp {
                seconds: r.seconds,
                nanos: r.nanos,
            },
            ready_to_use: true,
            group_snapshot_id: String::new(),
        }))
    }

    /// A page of the snapshots the query asks for.
    pub(super) async fn snapshot_page(
        &self,
        host: &NodeHost,
        query: &SnapshotQuery<'_>,
    ) -> Result<SnapshotPage, Status> {
        let dir = self.snapshots_dir();
        let names = host
            .run(move |h| h.entries(&dir))
            .await
            .map_err(|e| host_status("ListSnapshots", e))?;
        let mut matching = Vec::new();
        for id in names.iter().filter_map(|n| n.strip_suffix(".json")) {
            if !is_snapshot_id(id) || (!query.snapshot_id.is_empty() && id != query.snapshot_id) {
                continue;
            }
            if let Some(s) = self.stored_snapshot(host, id).await?
                && (query.source_volume_id.is_empty()
                    || s.source_volume_id == query.source_volume_id)
            {
                matching.push(s);
            }
        }
        let ids = matching.iter().map(|s| s.snapshot_id.clone()).collect();
        let (ids, next_token) = page(ids, query.starting_token, query.max_entries, is_snapshot_id)?;
        matching.retain(|s| ids.contains(&s.snapshot_id));
        Ok(SnapshotPage {
            entries: matching,
            next_token,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_start_at_their_token_and_refuse_tokens_never_handed_out() {
        let ids: Vec<String> = ["vol-a", "vol-b", "vol-c"].map(String::from).into();
        let ok = |s: &str| s.starts_with("vol-");
        assert_eq!(
            page(ids.clone(), "", 2, ok).unwrap(),
            (
                vec!["vol-a".to_string(), "vol-b".to_string()],
                "vol-c".to_string()
            )
        );
        assert_eq!(
            page(ids.clone(), "vol-c", 2, ok).unwrap(),
            (vec!["vol-c".to_string()], String::new())
        );
        // The volume a token named was deleted: the page starts after it.
        assert_eq!(
            page(ids.clone(), "vol-bb", 0, ok).unwrap().0,
            vec!["vol-c".to_string()]
        );
        assert_eq!(page(ids, "garbage", 1, ok).unwrap_err().code, Code::Aborted);
    }
}
