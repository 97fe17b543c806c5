//! Hostile node paths (see [`Lifecycle::run_hostile`]): with a volume
//! created, attached and staged, paths that leave the kubelet directory —
//! outright, by `..`, through a symbolic link — and ids that are paths are
//! each refused with a code a CO acts on, and nothing appears outside.

use std::path::{Path, PathBuf};

use super::steps::{Run, Step};
use super::{Csi, Error, Lifecycle, Report, csi};

/// One hostile request: what it is, and its answer.
type Answer = Result<(), tonic::Status>;

pub(crate) async fn run(l: &Lifecycle, csi: &Csi) -> Result<Report, Error> {
    let outside = outside_dir(l.kubelet())?;
    let mut run = Run::start(l, csi).await?;
    let result = cases(l, csi, &mut run, &outside).await;
    let mut ended = Ok(());
    for step in [Step::Unstage, Step::Detach, Step::Delete] {
        if result.is_err() {
            break;
        }
        ended = run.step(csi, step).await;
        if ended.is_err() {
            break;
        }
    }
    if result.is_err() || ended.is_err() {
        run.put_away(csi).await;
    }
    let _ = std::fs::remove_file(l.kubelet().join("pods/volplane-testing-link"));
    let left = entries(&outside);
    let _ = std::fs::remove_dir_all(&outside);
    let mut report = result?;
    ended?;
    if !left.is_empty() {
        return Err(Error::Violation(format!(
            "created outside the kubelet directory: {left:?}"
        )));
    }
    report.steps.extend(run.report.steps);
    report.leftovers = run.report.leftovers;
    Ok(report)
}

/// The hostile requests, with the volume created, attached and (for the
/// publish cases) staged.
async fn cases(
    l: &Lifecycle,
    csi: &Csi,
    run: &mut Run<'_>,
    outside: &Path,
) -> Result<Report, Error> {
    run.step(csi, Step::Create).await?;
    run.step(csi, Step::Attach).await?;
    // Staging paths while the volume is not staged yet (once it is, any
    // other path is refused for that alone); publish targets after.
    let report = stage_cases(l, csi, run, outside).await?;
    run.step(csi, Step::Stage).await?;
    publish_cases(l, csi, run, outside, report).await
}

/// An empty directory beside the kubelet directory: nothing may appear in it.
fn outside_dir(kubelet: &Path) -> Result<PathBuf, Error> {
    let parent = kubelet.parent().unwrap_or(Path::new("/tmp"));
    let outside = parent.join("volplane-testing-outside");
    std::fs::create_dir_all(&outside)
        .map_err(|e| Error::Setup(format!("create {}: {e}", outside.display())))?;
    Ok(outside)
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        out.push(e.path());
        out.extend(entries(&e.path()));
    }
    out
}

/// A symbolic link in the kubelet directory to `outside`.
fn link_out(l: &Lifecycle, outside: &Path) -> Result<PathBuf, Error> {
    let pods = l.kubelet().join("pods");
    std::fs::create_dir_all(&pods)
        .map_err(|e| Error::Setup(format!("create {}: {e}", pods.display())))?;
    let link = pods.join("volplane-testing-link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(outside, &link)
        .map_err(|e| Error::Setup(format!("symlink {}: {e}", link.display())))?;
    Ok(link)
}

/// `outside`, reached from the kubelet directory by `..`.
fn escape(l: &Lifecycle, outside: &Path) -> PathBuf {
    let name = outside.file_name().map(PathBuf::from).unwrap_or_default();
    l.kubelet().join("pods/../..").join(name)
}

async fn stage_cases(
    l: &Lifecycle,
    csi: &Csi,
    run: &Run<'_>,
    outside: &Path,
) -> Result<Report, Error> {
    let mut report = Report::default();
    if !run.stages() {
        return Ok(report);
    }
    let link = link_out(l, outside)?;
    let stagings = [
        (
            "a staging path outside the kubelet directory",
            outside.join("stage"),
        ),
        (
            "a staging path that leaves by ..",
            escape(l, outside).join("stage"),
        ),
        ("a staging path through a symbolic link", link.join("stage")),
    ];
    for (what, staging) in stagings {
        let answer = stage(csi, run, &staging).await;
        judge(&mut report, what, answer)?;
    }
    Ok(report)
}

async fn publish_cases(
    l: &Lifecycle,
    csi: &Csi,
    run: &Run<'_>,
    outside: &Path,
    mut report: Report,
) -> Result<Report, Error> {
    let link = link_out(l, outside)?;
    let targets = [
        (
            "a target outside the kubelet directory",
            outside.join("target"),
        ),
        (
            "a target that leaves by ..",
            escape(l, outside).join("target"),
        ),
        ("a target through a symbolic link", link.join("target")),
    ];
    for (what, target) in targets {
        let answer = publish(csi, run, &target).await;
        judge(&mut report, what, answer)?;
    }
    let mut not_ours = run.volume().clone();
    not_ours.volume_id = "../../../etc".into();
    let answer = publish_volume(csi, run, &not_ours, &l.target(0)).await;
    judge(&mut report, "a volume id that is a path", answer)?;
    Ok(report)
}

/// Refused with a code a CO acts on: never OK, never INTERNAL.
fn judge(report: &mut Report, what: &str, answer: Answer) -> Result<(), Error> {
    use tonic::Code;
    match answer {
        Err(s)
            if matches!(
                s.code(),
                Code::InvalidArgument | Code::FailedPrecondition | Code::NotFound
            ) =>
        {
            report.steps.push(format!("{what}: {:?}", s.code()));
            Ok(())
        }
        Err(s) => Err(Error::Violation(format!(
            "{what}: answered {:?} ({}); INVALID_ARGUMENT, FAILED_PRECONDITION or NOT_FOUND expected",
            s.code(),
            s.message()
        ))),
        Ok(()) => Err(Error::Violation(format!("{what}: accepted"))),
    }
}

async fn publish(csi: &Csi, run: &Run<'_>, target: &Path) -> Answer {
    publish_volume(csi, run, run.volume(), target).await
}

async fn publish_volume(csi: &Csi, run: &Run<'_>, v: &csi::Volume, target: &Path) -> Answer {
    let req = csi::NodePublishVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: run.publish_context().clone(),
        staging_target_path: run.staging_path(),
        target_path: target.display().to_string(),
        volume_capability: Some(run.capability()),
        volume_context: v.volume_context.clone(),
        secrets: run.secret("NodePublishVolumeSecret"),
        ..Default::default()
    };
    csi.node.clone().node_publish_volume(req).await.map(|_| ())
}

async fn stage(csi: &Csi, run: &Run<'_>, staging: &Path) -> Answer {
    let v = run.volume();
    let req = csi::NodeStageVolumeRequest {
        volume_id: v.volume_id.clone(),
        publish_context: run.publish_context().clone(),
        staging_target_path: staging.display().to_string(),
        volume_capability: Some(run.capability()),
        volume_context: v.volume_context.clone(),
        secrets: run.secret("NodeStageVolumeSecret"),
    };
    csi.node.clone().node_stage_volume(req).await.map(|_| ())
}
