//! Making a failing program small: programs with fewer steps to try, the
//! largest cuts first, as delta debugging does. The adapter runs each
//! against the driver and keeps the first that still breaks the rule.

use super::machine::Program;
use super::step::Step;

/// Smaller programs than `p`: first only the steps about the objects of its
/// last group (where it broke), then without a run of groups (half of them,
/// a quarter, … one), then with one group of steps in flight together sent
/// one step at a time, then with one step of a group left out.
pub fn candidates(p: &Program) -> Vec<Program> {
    let n = p.len();
    let mut out = Vec::new();
    if let Some(sliced) = slice(p) {
        out.push(sliced);
    }
    let mut size = n / 2;
    while size >= 1 {
        let mut start = 0;
        while start < n {
            let end = (start + size).min(n);
            let mut c: Program = p[..start].to_vec();
            c.extend_from_slice(&p[end..]);
            if !c.is_empty() {
                out.push(c);
            }
            start += size;
        }
        size /= 2;
    }
    for (i, g) in p.iter().enumerate().filter(|(_, g)| g.len() > 1) {
        let mut split: Program = p[..i].to_vec();
        split.extend(g.iter().map(|s| vec![*s]));
        split.extend_from_slice(&p[i + 1..]);
        out.push(split);
        for j in 0..g.len() {
            let mut fewer = p.clone();
            fewer[i].remove(j);
            out.push(fewer);
        }
    }
    out
}

/// `p` with only the steps about the objects its last group is about (and
/// the restarts), when that is fewer steps.
fn slice(p: &Program) -> Option<Program> {
    let last = p.last()?;
    let objects: Vec<u16> = last.iter().flat_map(Step::objects).collect();
    if objects.is_empty() {
        return None;
    }
    let keep = |s: &Step| *s == Step::Restart || s.objects().iter().any(|o| objects.contains(o));
    let sliced: Program = p
        .iter()
        .map(|g| g.iter().copied().filter(keep).collect::<Vec<_>>())
        .filter(|g| !g.is_empty())
        .collect();
    (steps(&sliced) < steps(p)).then_some(sliced)
}

/// The steps in a program.
pub fn steps(p: &Program) -> usize {
    p.iter().map(Vec::len).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::step::Step;

    fn prog(n: u8) -> Program {
        (0..n).map(|v| vec![Step::DeleteVolume { v }]).collect()
    }

    #[test]
    fn the_steps_about_where_it_broke_come_first() {
        let mut p = prog(4);
        p.push(vec![Step::DeleteVolume { v: 1 }]);
        assert_eq!(
            candidates(&p)[0],
            vec![vec![Step::DeleteVolume { v: 1 }]; 2]
        );
    }

    #[test]
    fn the_largest_cuts_come_first_and_every_candidate_is_smaller() {
        let p = prog(8);
        let c = candidates(&p);
        assert_eq!(c[1].len(), 4);
        assert_eq!(c[2].len(), 4);
        assert!(c.iter().all(|c| steps(c) < steps(&p)));
        // Every single group can go.
        for i in 0..8u8 {
            assert!(
                c.iter()
                    .any(|c| c.len() == 7 && !c.contains(&vec![Step::DeleteVolume { v: i }]))
            );
        }
    }

    #[test]
    fn a_concurrent_group_is_split_and_thinned() {
        let p = vec![vec![
            Step::DeleteVolume { v: 0 },
            Step::DeleteVolume { v: 1 },
        ]];
        let c = candidates(&p);
        assert!(c.contains(&vec![
            vec![Step::DeleteVolume { v: 0 }],
            vec![Step::DeleteVolume { v: 1 }]
        ]));
        assert!(c.contains(&vec![vec![Step::DeleteVolume { v: 1 }]]));
    }
}
