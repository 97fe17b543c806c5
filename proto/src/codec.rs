//! The wire codec of every CSI and registration service: prost's, except
//! that a message that is not valid protobuf (a truncated field, a bad
//! wire type, a string that is not UTF-8) is INVALID_ARGUMENT naming the
//! message, as the CSI spec answers any malformed request — not INTERNAL,
//! which tells a caller the driver is broken.

use std::marker::PhantomData;

use prost::Message;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic_prost::ProstEncoder;

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct CsiCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for CsiCodec<T, U> {
    fn default() -> Self {
        CsiCodec(PhantomData)
    }
}

impl<T, U> Codec for CsiCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = CsiDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstEncoder::default()
    }

    fn decoder(&mut self) -> CsiDecoder<U> {
        CsiDecoder(PhantomData)
    }
}

/// Decodes one `U`; see the module documentation.
#[derive(Debug, Clone)]
pub struct CsiDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for CsiDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|e| malformed::<U>(&e))
    }
}

/// The refusal of a `U` that is not valid protobuf.
pub fn malformed<U>(e: &prost::DecodeError) -> Status {
    let name = std::any::type_name::<U>();
    let name = name.rsplit("::").next().unwrap_or(name);
    Status::invalid_argument(format!(
        "the {name} is not valid protobuf ({e}): send a well-formed CSI message"
    ))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use crate::csi::CreateVolumeRequest;

    #[test]
    fn a_malformed_message_is_an_invalid_argument_naming_it() {
        // Field 1 (name) as a string whose bytes are not UTF-8.
        let bytes: &[u8] = &[0x0a, 0x02, 0xff, 0xfe];
        let e = CreateVolumeRequest::decode(bytes).unwrap_err();
        let s = super::malformed::<CreateVolumeRequest>(&e);
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert!(
            s.message()
                .contains("CreateVolumeRequest is not valid protobuf"),
            "{}",
            s.message()
        );
    }
}
