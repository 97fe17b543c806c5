//! VolumeAttributesClass at provisioning, as external-provisioner's
//! prepareProvision checks it.

use super::*;

fn rig_with_modify() -> Rig<Provisioner> {
    let mut config = ProvisionerConfig::new(DRIVER);
    config.modify_volume = true;
    let mut r = Rig::new(Provisioner::new(config));
    r.answer_csi(|call| match call {
        Request::CreateVolume(c) => created(c),
        other => Err(Status::unimplemented(other.method())),
    });
    r
}

fn gold(driver: &str) -> Object {
    Object::AttributesClass(VolumeAttributesClass::new(
        "gold",
        driver,
        &[("iops", "3000"), ("throughput", "125")],
    ))
}

fn claim_of(class: &str) -> PersistentVolumeClaim {
    let mut c = claim("data");
    c.spec.volume_attributes_class_name = Some(class.into());
    c
}

#[test]
fn the_class_parameters_reach_create_volume_as_mutable_and_the_pv_names_the_class() {
    let mut r = rig_with_modify();
    class(&mut r, &[("kind", "fast")]);
    r.create(gold(DRIVER));
    let Object::Pvc(c) = r.create(Object::Pvc(claim_of("gold"))) else {
        unreachable!()
    };
    let req = creates(&r)[0];
    assert_eq!(req.mutable_parameters.len(), 2);
    assert_eq!(&req.mutable_parameters["iops"], "3000");
    assert!(
        !req.parameters.contains_key("iops"),
        "mutable parameters stay out of parameters"
    );
    let pv = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("provisioned");
    assert_eq!(
        pv.spec.volume_attributes_class_name.as_deref(),
        Some("gold")
    );
}

#[test]
fn a_claim_without_a_class_gets_no_mutable_parameters_and_no_class() {
    let mut r = rig_with_modify();
    class(&mut r, &[]);
    let mut c = claim("data");
    c.spec.volume_attributes_class_name = Some(String::new());
    let Object::Pvc(c) = r.create(Object::Pvc(c)) else {
        unreachable!()
    };
    assert!(creates(&r)[0].mutable_parameters.is_empty());
    let pv = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("provisioned");
    assert_eq!(pv.spec.volume_attributes_class_name, None);
}

#[test]
fn a_driver_without_modify_volume_refuses_a_claim_naming_a_class() {
    let mut r = rig();
    class(&mut r, &[]);
    r.create(gold(DRIVER));
    r.create(Object::Pvc(claim_of("gold")));
    assert!(creates(&r).is_empty());
    assert_eq!(
        failures(&r),
        [
            "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is not reported"
        ]
    );
}

#[test]
fn a_missing_class_fails_until_it_exists() {
    let mut r = rig_with_modify();
    class(&mut r, &[]);
    r.create(Object::Pvc(claim_of("gold")));
    assert!(creates(&r).is_empty());
    assert_eq!(
        failures(&r),
        ["volumeattributesclasses.storage.k8s.io \"gold\" not found"]
    );
    r.create(gold(DRIVER));
    assert_eq!(
        creates(&r).len(),
        1,
        "the class's arrival lets the claim go on"
    );
}

#[test]
fn a_class_of_another_driver_is_refused_with_upstreams_message() {
    let mut r = rig_with_modify();
    class(&mut r, &[]);
    r.create(gold("other.csi.io"));
    r.create(Object::Pvc(claim_of("gold")));
    assert!(creates(&r).is_empty());
    assert_eq!(
        failures(&r),
        [format!(
            "VAC gold referenced in PVC is for driver other.csi.io which does not match driver name {DRIVER}"
        )]
    );
}

#[test]
fn the_controller_modify_secret_is_named_on_the_pv_for_the_resizer() {
    let mut r = rig_with_modify();
    class(
        &mut r,
        &[
            (
                "csi.storage.k8s.io/controller-modify-secret-name",
                "${pvc.name}-modify",
            ),
            (
                "csi.storage.k8s.io/controller-modify-secret-namespace",
                "storage",
            ),
        ],
    );
    let Object::Pvc(c) = r.create(Object::Pvc(claim("data"))) else {
        unreachable!()
    };
    let pv = pv(&r, &format!("pvc-{}", c.metadata.uid)).expect("provisioned");
    let ann = &pv.metadata.annotations;
    assert_eq!(&ann[names::ANN_MODIFY_SECRET_NAME], "data-modify");
    assert_eq!(&ann[names::ANN_MODIFY_SECRET_NAMESPACE], "storage");
    assert!(
        creates(&r)[0].parameters.is_empty(),
        "the modify secret keys are no driver parameters"
    );
}
