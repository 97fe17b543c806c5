//! A typed view of a shared object: a cached claim or volume read without
//! copying it. Machines read an object many times per write (every sync of
//! a claim reads the claim and its volume) and copy it only to change it.

use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;

use super::{
    Kind, Node, Object, PersistentVolume, PersistentVolumeClaim, Pod, StorageClass,
    VolumeAttachment,
};

/// An object type that is one variant of [`Object`].
pub trait Variant {
    /// The kind of this variant.
    const KIND: Kind;
    /// `o` as this variant, when it is one.
    fn of(o: &Object) -> Option<&Self>;
}

macro_rules! variant {
    ($t:ty, $kind:ident, $as:ident) => {
        impl Variant for $t {
            const KIND: Kind = Kind::$kind;
            fn of(o: &Object) -> Option<&Self> {
                o.$as()
            }
        }
    };
    ($t:ty, $kind:ident, $variant:path) => {
        impl Variant for $t {
            const KIND: Kind = Kind::$kind;
            fn of(o: &Object) -> Option<&Self> {
                match o {
                    $variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

variant!(PersistentVolume, PersistentVolume, as_pv);
variant!(PersistentVolumeClaim, PersistentVolumeClaim, as_pvc);
variant!(StorageClass, StorageClass, as_class);
variant!(Pod, Pod, as_pod);
variant!(Node, Node, as_node);
variant!(VolumeAttachment, VolumeAttachment, as_va);

variant!(
    super::VolumeSnapshotContent,
    VolumeSnapshotContent,
    Object::Content
);
variant!(
    super::VolumeGroupSnapshotContent,
    VolumeGroupSnapshotContent,
    Object::GroupContent
);

/// A shared object known to be a `T`; derefs to the `T`.
pub struct Shared<T> {
    object: Arc<Object>,
    variant: PhantomData<fn() -> T>,
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared {
            object: self.object.clone(),
            variant: PhantomData,
        }
    }
}

impl<T: Variant> Shared<T> {
    /// `object` as a `T`, or `None` when it is another kind.
    pub fn new(object: Arc<Object>) -> Option<Shared<T>> {
        T::of(&object)?;
        Some(Shared {
            object,
            variant: PhantomData,
        })
    }

    /// The object itself.
    pub fn object(&self) -> &Arc<Object> {
        &self.object
    }
}

impl<T: Variant> Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        T::of(&self.object).expect("a Shared<T> holds a T (checked when made)")
    }
}

impl<T> std::hash::Hash for Shared<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.object.hash(state);
    }
}

impl<T: Variant + std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_is_made_only_of_its_own_variant_and_shares_the_object() {
        let o = Arc::new(Object::Pv(PersistentVolume::new("v")));
        assert!(Shared::<PersistentVolumeClaim>::new(o.clone()).is_none());
        let pv = Shared::<PersistentVolume>::new(o.clone()).expect("a volume");
        assert_eq!(pv.name(), "v");
        assert!(Arc::ptr_eq(pv.object(), &o), "the view copied the object");
        assert_eq!(Arc::strong_count(&o), 2);
    }
}
