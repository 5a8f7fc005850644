use super::*;

const SERVER: &str = "127.0.0.1:2379";

fn session() -> Session {
    Session::new(SERVER.parse().unwrap())
}

fn frame_bytes(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    frame_header(&mut out, payload.len(), kind, flags, stream);
    out.extend_from_slice(payload);
    out
}

/// A gRPC message of `len` bytes in its prefix.
fn grpc_message(len: usize) -> Vec<u8> {
    let mut m = vec![0];
    m.extend_from_slice(&(len as u32).to_be_bytes());
    m.extend((0..len).map(|i| i as u8));
    m
}

/// (type, flags, stream, payload) of each frame of `bytes`, which must be whole frames.
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut all = Vec::new();
    while !bytes.is_empty() {
        let len = u32_at(&[0, bytes[0], bytes[1], bytes[2]], 0) as usize;
        all.push((bytes[3], bytes[4], u32_at(bytes, 5), bytes[FRAME_HEADER..FRAME_HEADER + len].to_vec()));
        bytes = &bytes[FRAME_HEADER + len..];
    }
    all
}

/// The fields of a block of new-name literals with short, plain strings.
fn literals(mut block: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    while !block.is_empty() {
        assert_eq!(block[0], 0x00, "a literal without indexing, new name");
        let mut strings = Vec::new();
        block = &block[1..];
        for _ in 0..2 {
            let len = usize::from(block[0]);
            assert!(len < 0x7f, "no Huffman, a one-byte length");
            strings.push(String::from_utf8(block[1..1 + len].to_vec()).unwrap());
            block = &block[1 + len..];
        }
        fields.push((strings[0].clone(), strings[1].clone()));
    }
    fields
}

/// A request's bytes, the preface (if any) removed.
fn request_frames(session: &mut Session, call: Call<'_>) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    session.request(call, &mut out);
    frames(out.strip_prefix(PREFACE).unwrap_or(&out))
}

/// An answer: response headers, the message, trailers.
fn answer_frames(stream: u32, message: &[u8]) -> Vec<u8> {
    let mut bytes = frame_bytes(frame::HEADERS, flag::END_HEADERS, stream, b"\x88");
    bytes.extend(frame_bytes(frame::DATA, 0, stream, message));
    bytes.extend(frame_bytes(frame::HEADERS, flag::END_HEADERS | flag::END_STREAM, stream, b"\x40\x00"));
    bytes
}

#[test]
fn requests_protobuf_is_etcds() {
    let mut out = Vec::new();
    Call::Put { key: b"foo", value: b"bar" }.encode(&mut out);
    assert_eq!(out, b"\x0a\x03foo\x12\x03bar");
    out.clear();
    Call::Range { key: b"foo" }.encode(&mut out);
    assert_eq!(out, b"\x0a\x03foo");
    out.clear();
    let value = vec![b'v'; 300];
    Call::Put { key: b"k", value: &value }.encode(&mut out);
    assert_eq!(&out[..5], b"\x0a\x01k\x12\xac");
    assert_eq!(out[5], 0x02, "300 as a varint: ac 02");
    assert_eq!(out.len(), 6 + 300);
}

#[test]
fn hpack_integers_past_their_prefix_continue() {
    let mut out = Vec::new();
    hpack_integer(&mut out, 5, 0, 10);
    hpack_integer(&mut out, 5, 0, 1337);
    hpack_integer(&mut out, 7, 0x80, 127);
    assert_eq!(out, [10, 31, 154, 10, 0xff, 0], "RFC 7541, C.1");
}

#[test]
fn a_connection_opens_with_the_preface_and_calls_take_odd_streams() {
    let mut s = session();
    let mut out = Vec::new();
    s.request(Call::Put { key: b"foo", value: b"bar" }, &mut out);
    let rest = out.strip_prefix(PREFACE).expect("the preface first");
    let first = frames(rest);
    assert_eq!(first.len(), 4, "{first:?}");
    assert_eq!(first[0], (frame::SETTINGS, 0, 0, vec![0, 2, 0, 0, 0, 0, 0, 4, 0, 0x80, 0, 0]));
    let increment = u32_at(&first[1].3, 0);
    assert_eq!((first[1].0, first[1].2, increment), (frame::WINDOW_UPDATE, 0, RECEIVE_WINDOW - 65_535));
    let (kind, flags, stream, block) = &first[2];
    assert_eq!((*kind, *flags, *stream), (frame::HEADERS, flag::END_HEADERS, 1));
    let expected = [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", "/etcdserverpb.KV/Put"),
        (":authority", SERVER),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]
    .map(|(n, v)| (n.to_string(), v.to_string()));
    assert_eq!(literals(block), expected);
    assert_eq!(
        first[3],
        (frame::DATA, flag::END_STREAM, 1, b"\x00\x00\x00\x00\x0a\x0a\x03foo\x12\x03bar".to_vec())
    );

    assert_eq!(s.answer(&mut answer_frames(1, &grpc_message(7))), Ok(Some(Ok(()))));
    let second = request_frames(&mut s, Call::Range { key: b"foo" });
    assert_eq!(second.len(), 2, "no preface, no SETTINGS again: {second:?}");
    assert_eq!((second[0].0, second[0].2), (frame::HEADERS, 3));
    assert_eq!(literals(&second[0].3)[2].1, "/etcdserverpb.KV/Range");
    assert_eq!(second[1], (frame::DATA, flag::END_STREAM, 3, b"\x00\x00\x00\x00\x05\x0a\x03foo".to_vec()));
}

#[test]
fn an_answer_reads_the_same_whatever_the_reads_cut() {
    let mut bytes = frame_bytes(frame::SETTINGS, 0, 0, &[0, 3, 0, 0, 0, 100, 0, 4, 0, 1, 0, 0]);
    bytes.extend(frame_bytes(frame::SETTINGS, flag::ACK, 0, b""));
    bytes.extend(frame_bytes(frame::WINDOW_UPDATE, 0, 0, &[0, 0, 0, 20]));
    bytes.extend(answer_frames(1, &grpc_message(40)));
    bytes.extend(frame_bytes(frame::PING, 0, 0, b"pingpong"));
    for cut in 0..=bytes.len() {
        let mut s = session();
        let mut out = Vec::new();
        s.request(Call::Put { key: b"foo", value: b"bar" }, &mut out);
        let mut buf = bytes[..cut].to_vec();
        let early = s.answer(&mut buf).unwrap();
        buf.extend_from_slice(&bytes[cut..]);
        let outcome = match early {
            Some(outcome) => outcome,
            None => s.answer(&mut buf).unwrap().expect("the answer is whole"),
        };
        assert_eq!(outcome, Ok(()), "cut at {cut}");
        // What follows the call's end stays for the next answer.
        assert_eq!(buf, frame_bytes(frame::PING, 0, 0, b"pingpong"), "cut at {cut}");
        assert_eq!(s.answer(&mut buf), Ok(None));
        let next = request_frames(&mut s, Call::Range { key: b"foo" });
        assert_eq!(next[0], (frame::SETTINGS, flag::ACK, 0, vec![]), "cut at {cut}");
        assert_eq!(next[1], (frame::PING, flag::ACK, 0, b"pingpong".to_vec()), "cut at {cut}");
        assert_eq!((next[2].0, next[2].2), (frame::HEADERS, 3), "cut at {cut}");
    }
    // A byte at a time.
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    let mut buf = Vec::new();
    let mut outcome = None;
    for &b in &bytes {
        buf.push(b);
        if let Some(o) = s.answer(&mut buf).unwrap() {
            assert!(outcome.replace(o).is_none(), "one outcome");
        }
    }
    assert_eq!(outcome, Some(Ok(())));
}

#[test]
fn a_reset_stream_fails_the_call_and_other_streams_are_skipped() {
    let mut s = session();
    s.request(Call::Put { key: b"k", value: b"v" }, &mut Vec::new());
    let mut buf = frame_bytes(frame::RST_STREAM, 0, 7, &[0, 0, 0, 2]);
    buf.extend(answer_frames(5, &grpc_message(3)));
    // PRIORITY (type 2) and a type this client does not know.
    buf.extend(frame_bytes(0x2, 0, 1, &[0, 0, 0, 0, 16]));
    buf.extend(frame_bytes(0xee, 0xff, 1, b"an extension"));
    assert_eq!(s.answer(&mut buf), Ok(None));
    assert!(buf.is_empty());
    buf.extend(frame_bytes(frame::RST_STREAM, 0, 1, &[0, 0, 0, 8]));
    let outcome = s.answer(&mut buf).unwrap().unwrap();
    assert_eq!(outcome, Err(GrpcError::Reset { path: "/etcdserverpb.KV/Put", code: 8 }));
    assert_eq!(
        outcome.unwrap_err().to_string(),
        "/etcdserverpb.KV/Put: the server reset the stream (error code 8 CANCEL)"
    );
    // The stream's later frames belong to no call.
    buf.extend(answer_frames(1, &grpc_message(3)));
    assert_eq!(s.answer(&mut buf), Ok(None));
}

#[test]
fn answers_without_one_whole_message_fail() {
    let trailers_only = frame_bytes(frame::HEADERS, flag::END_HEADERS | flag::END_STREAM, 1, b"\x88");
    let mut short = grpc_message(10);
    short.truncate(12);
    let mut two = grpc_message(2);
    two.extend(grpc_message(0));
    for (bytes, says) in [
        (trailers_only, "without a message (a gRPC error in its trailers)"),
        (answer_frames(1, &short), "ended inside the message"),
        (answer_frames(1, &grpc_message(10)[..3]), "ended inside the message"),
        (answer_frames(1, &two), "more than one message"),
    ] {
        let mut s = session();
        s.request(Call::Range { key: b"k" }, &mut Vec::new());
        let outcome = s.answer(&mut bytes.clone()).unwrap().unwrap();
        assert!(outcome.as_ref().is_err_and(|e| e.to_string().contains(says)), "{outcome:?}, not {says:?}");
    }
    // An empty message is a whole one (an answer whose fields are all at their defaults).
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    assert_eq!(s.answer(&mut answer_frames(1, &grpc_message(0))), Ok(Some(Ok(()))));
}

#[test]
fn trailers_in_continuation_frames_and_padded_data_end_the_call() {
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    let mut padded = vec![4];
    padded.extend(grpc_message(6));
    padded.extend([0; 4]);
    let mut buf = frame_bytes(frame::HEADERS, 0, 1, b"\x88");
    buf.extend(frame_bytes(frame::CONTINUATION, flag::END_HEADERS, 1, b""));
    buf.extend(frame_bytes(frame::DATA, flag::PADDED, 1, &padded));
    buf.extend(frame_bytes(frame::HEADERS, flag::END_STREAM, 1, b"\x40"));
    buf.extend(frame_bytes(frame::CONTINUATION, 0, 1, b"\x00"));
    assert_eq!(s.answer(&mut buf), Ok(None), "the trailers' block is still open");
    assert!(buf.is_empty());
    buf.extend(frame_bytes(frame::CONTINUATION, flag::END_HEADERS, 1, b"\x00"));
    assert_eq!(s.answer(&mut buf), Ok(Some(Ok(()))));

    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    let mut buf = frame_bytes(frame::HEADERS, 0, 1, b"\x88");
    buf.extend(frame_bytes(frame::DATA, 0, 1, &grpc_message(1)));
    assert_eq!(s.answer(&mut buf), Err(Http2Error::Malformed("a header block interrupted by another frame")));
    let mut buf = frame_bytes(frame::DATA, flag::PADDED, 1, &[9, 1, 2]);
    assert!(matches!(session().answer(&mut buf), Err(Http2Error::Malformed(_))));
}

#[test]
fn oversized_frames_and_messages_are_refused() {
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    // Refused from its header alone, before the payload comes.
    let mut buf = vec![0, 0x40, 0x01, frame::DATA, 0, 0, 0, 0, 1];
    assert_eq!(s.answer(&mut buf), Err(Http2Error::FrameTooLong(MAX_FRAME + 1)));
    let too_long = frame_bytes(frame::DATA, 0, 1, &[0, 0, 0x40, 0, 1]);
    assert_eq!(session().answer(&mut too_long.clone()), Ok(None), "no call: the stream is not read");
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    assert_eq!(s.answer(&mut too_long.clone()), Err(Http2Error::MessageTooLong(MAX_MESSAGE + 1)));
    let mut s = session();
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    let mut longest = frame_bytes(frame::DATA, 0, 1, &[0, 0, 0x40, 0, 0]);
    assert_eq!(s.answer(&mut longest), Ok(None), "the longest message is taken");
}

#[test]
fn goaway_and_broken_control_frames_end_the_connection() {
    let mut goaway = vec![0, 0, 0, 1, 0, 0, 0, 0];
    goaway.extend_from_slice(b"graceful");
    let error = session().answer(&mut frame_bytes(frame::GOAWAY, 0, 0, &goaway)).unwrap_err();
    assert_eq!(error, Http2Error::GoAway { code: 0, last_stream: 1, debug: "graceful".into() });
    assert_eq!(
        error.to_string(),
        "http/2: the server is closing the connection (GOAWAY, error code 0 NO_ERROR, last stream 1): graceful"
    );
    for bytes in [
        frame_bytes(frame::SETTINGS, 0, 0, &[0, 4, 0, 0]),
        frame_bytes(frame::SETTINGS, flag::ACK, 0, &[0; 6]),
        frame_bytes(frame::SETTINGS, 0, 0, &[0, 4, 0x80, 0, 0, 0]),
        frame_bytes(frame::SETTINGS, 0, 1, &[]),
        frame_bytes(frame::PING, 0, 0, b"short"),
        frame_bytes(frame::GOAWAY, 0, 0, &[0; 7]),
        frame_bytes(frame::WINDOW_UPDATE, 0, 0, &[0; 3]),
        frame_bytes(frame::RST_STREAM, 0, 0, &[0; 4]),
        frame_bytes(frame::DATA, 0, 0, b"x"),
        frame_bytes(frame::HEADERS, flag::END_HEADERS, 0, b""),
        frame_bytes(frame::CONTINUATION, flag::END_HEADERS, 1, b""),
        frame_bytes(frame::PUSH_PROMISE, flag::END_HEADERS, 1, &[0, 0, 0, 2]),
    ] {
        let mut s = session();
        s.request(Call::Range { key: b"k" }, &mut Vec::new());
        assert!(matches!(s.answer(&mut bytes.clone()), Err(Http2Error::Malformed(_))), "{bytes:?}");
    }
}

#[test]
fn data_received_is_given_back_every_16_kib_in_the_next_request() {
    let mut s = session();
    let mut window_updates = Vec::new();
    let mut returned = 0;
    let calls = 100;
    for call in 0..calls {
        let sent = request_frames(&mut s, Call::Range { key: b"k" });
        for (kind, _, stream, payload) in &sent {
            if *kind == frame::WINDOW_UPDATE && call > 0 {
                assert_eq!(*stream, 0, "connection-level");
                window_updates.push(call);
                returned += u32_at(payload, 0) as usize;
            }
        }
        let stream = 1 + 2 * call as u32;
        // 1,000 bytes of DATA an answer.
        assert_eq!(s.answer(&mut answer_frames(stream, &grpc_message(995))), Ok(Some(Ok(()))));
    }
    // Every 17 answers pass 16 KiB; the update goes with the request after.
    assert_eq!(window_updates, [17, 34, 51, 68, 85]);
    assert_eq!(returned + s.unreturned, 1_000 * calls as usize);
    assert!(s.unreturned < WINDOW_UPDATE_AFTER);
}

#[test]
fn a_request_past_the_servers_window_waits_for_its_updates() {
    let mut s = session();
    let value = vec![b'v'; 70_000];
    let mut message = Vec::new();
    Call::Put { key: b"k", value: &value }.encode(&mut message);
    let total = MESSAGE_PREFIX + message.len();
    let first = request_frames(&mut s, Call::Put { key: b"k", value: &value });
    let data: Vec<_> = first.iter().filter(|f| f.0 == frame::DATA).collect();
    assert_eq!(data.iter().map(|f| f.3.len()).sum::<usize>(), 65_535, "the initial window");
    assert!(data.iter().all(|f| f.1 == 0 && f.3.len() <= MAX_FRAME), "no END_STREAM yet");
    let mut out = Vec::new();
    s.continue_request(&mut out);
    assert!(out.is_empty(), "no window yet");
    // The connection's window opens, then the stream's, and the server's SETTINGS come.
    let mut buf = frame_bytes(frame::WINDOW_UPDATE, 0, 0, &[0, 1, 0, 0]);
    assert_eq!(s.answer(&mut buf), Ok(None));
    s.continue_request(&mut out);
    assert!(out.is_empty(), "the stream's window is still shut");
    let mut buf = frame_bytes(frame::SETTINGS, 0, 0, &[0, 4, 0, 0, 0xff, 0xff]);
    buf.extend(frame_bytes(frame::WINDOW_UPDATE, 0, 1, &[0, 0, 0x10, 0]));
    assert_eq!(s.answer(&mut buf), Ok(None));
    s.continue_request(&mut out);
    let rest = frames(&out);
    assert_eq!(rest[0], (frame::SETTINGS, flag::ACK, 0, vec![]), "owed frames go along");
    assert_eq!(rest.iter().skip(1).map(|f| f.3.len()).sum::<usize>(), 4_096);
    out.clear();
    // A larger initial window widens the open stream's.
    let mut buf = frame_bytes(frame::SETTINGS, 0, 0, &[0, 4, 0, 0x10, 0, 0]);
    assert_eq!(s.answer(&mut buf), Ok(None));
    s.continue_request(&mut out);
    let rest = frames(&out);
    assert_eq!(rest.iter().skip(1).map(|f| f.3.len()).sum::<usize>(), total - 65_535 - 4_096);
    assert_eq!(rest.last().unwrap().1, flag::END_STREAM);
    out.clear();
    s.continue_request(&mut out);
    assert!(out.is_empty(), "all sent");
    // The next stream starts with the new initial window, less what the connection used.
    let next = request_frames(&mut s, Call::Put { key: b"k", value: &value });
    let sent: usize = next.iter().filter(|f| f.0 == frame::DATA).map(|f| f.3.len()).sum();
    assert_eq!(sent, 65_535 + 65_536 - total);
}

#[test]
fn used_up_stream_ids_end_the_connection() {
    let mut s = session();
    s.next_stream = MAX_31;
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    assert_eq!(s.answer(&mut answer_frames(MAX_31, &grpc_message(1))), Ok(Some(Ok(()))));
    s.request(Call::Range { key: b"k" }, &mut Vec::new());
    assert_eq!(s.answer(&mut Vec::new()), Err(Http2Error::StreamsExhausted));
}
