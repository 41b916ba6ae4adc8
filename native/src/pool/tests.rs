use super::*;

fn body(tokens: &[&[f32]]) -> Vec<u8> {
    let rows: Vec<String> = tokens
        .iter()
        .map(|t| format!("[{}]", t.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")))
        .collect();
    format!("[{{\"index\":0,\"embedding\":[{}]}}]", rows.join(",")).into_bytes()
}

#[test]
fn each_span_is_its_tokens_mean_normalised() {
    let b = body(&[&[9.0, 9.0], &[1.0, 0.0], &[3.0, 4.0], &[0.0, 2.0]]);
    let got = pool_spans(&b, &[(1, 2), (2, 4), (1, 4)]).unwrap();
    assert_eq!(got[0], vec![1.0, 0.0]);
    // mean of (3,4) and (0,2) = (1.5, 3): normalised (1,2)/sqrt(5)
    let r = 1.0 / 5f32.sqrt();
    assert!((got[1][0] - r).abs() < 1e-6 && (got[1][1] - 2.0 * r).abs() < 1e-6);
    // (1,0)+(3,4)+(0,2) = (4,6): normalised (2,3)/sqrt(13)
    let s = 1.0 / 13f32.sqrt();
    assert!((got[2][0] - 2.0 * s).abs() < 1e-6 && (got[2][1] - 3.0 * s).abs() < 1e-6);
}

#[test]
fn a_bare_object_is_read_too_and_zero_stays_zero() {
    let b = br#"{"index":0,"embedding":[[0,0],[0,0]]}"#;
    assert_eq!(pool_spans(b, &[(0, 2)]).unwrap(), vec![vec![0.0, 0.0]]);
}

#[test]
fn bad_spans_and_shapes_are_errors() {
    let b = body(&[&[1.0, 0.0], &[0.0, 1.0]]);
    assert_eq!(pool_spans(&b, &[(1, 3)]), Err(PoolError::Span { start: 1, end: 3, tokens: 2 }));
    assert_eq!(pool_spans(&b, &[(1, 1)]), Err(PoolError::Span { start: 1, end: 1, tokens: 2 }));
    assert!(matches!(pool_spans(b"{\"error\":{}}", &[(0, 1)]), Err(PoolError::Shape(_))));
    assert!(matches!(pool_spans(b"[]", &[(0, 1)]), Err(PoolError::Shape(_))));
    // a pooled answer (one flat vector) is not per-token
    let pooled = br#"[{"index":0,"embedding":[0.1,0.2]}]"#;
    assert!(matches!(pool_spans(pooled, &[(0, 1)]), Err(PoolError::Shape(_))));
    let ragged = br#"[{"index":0,"embedding":[[1,2],[3]]}]"#;
    assert_eq!(pool_spans(ragged, &[(0, 1)]), Err(PoolError::Ragged { first: 2, other: 1 }));
    let two = br#"[{"embedding":[[1]]},{"embedding":[[1]]}]"#;
    assert!(matches!(pool_spans(two, &[(0, 1)]), Err(PoolError::Shape(_))));
}
