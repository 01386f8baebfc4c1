use super::*;

fn exposure(api: &str, raft: &str) -> Exposure {
    Exposure {
        api_addr: api.parse().unwrap(),
        raft_addr: raft.parse().unwrap(),
        metrics_addr: None,
        api_tls: false,
        api_client_certs: false,
        api_tokens: false,
        raft_tls: false,
        insecure: false,
    }
}

#[test]
fn ipv4_mapped_loopback_is_loopback() {
    for lo in
        ["127.0.0.1:1", "127.9.9.9:1", "[::1]:1", "[::ffff:127.0.0.1]:1", "[::ffff:127.3.2.1]:1"]
    {
        assert!(is_loopback(lo.parse().unwrap()), "{lo}");
    }
    for not in ["10.0.0.1:1", "0.0.0.0:1", "[::]:1", "[::ffff:10.0.0.1]:1", "[::ffff:0.0.0.0]:1"] {
        assert!(!is_loopback(not.parse().unwrap()), "{not}");
    }
    // Serving plain HTTP on a mapped loopback address needs no --insecure.
    assert!(check(&exposure("[::ffff:127.0.0.1]:8080", "[::ffff:127.0.0.1]:8090")).is_ok());
}

#[test]
fn endpoints_off_loopback_are_recognised() {
    for lo in [
        "127.0.0.1:8080",
        "http://127.0.0.1:8080",
        "http://localhost:8080/",
        "localhost:8080",
        "http://[::1]:8080",
        "[::ffff:127.0.0.1]:8080",
    ] {
        assert!(is_loopback_endpoint(lo), "{lo}");
    }
    for not in [
        "10.0.0.1:8080",
        "http://db1.example.com:8080",
        "https://[::ffff:10.1.1.1]:1",
        "example:80",
    ] {
        assert!(!is_loopback_endpoint(not), "{not}");
    }
}

#[test]
fn plain_ports_off_loopback_need_insecure() {
    let e = exposure("0.0.0.0:8080", "127.0.0.1:8090");
    let why = check(&e).unwrap_err();
    assert!(why.contains("0.0.0.0:8080") && why.contains("--insecure"), "{why}");
    assert!(check(&Exposure { insecure: true, ..e }).is_ok());
    let tls = Exposure { api_tls: true, raft_tls: true, ..exposure("0.0.0.0:1", "0.0.0.0:2") };
    assert!(check(&tls).is_ok());
}

#[test]
fn insecure_warns_about_the_plain_raft_port() {
    let e = Exposure { insecure: true, ..exposure("127.0.0.1:8080", "10.0.0.1:8090") };
    let warned = warnings(&e);
    assert!(
        warned.iter().any(
            |w| w.contains("Raft port at 10.0.0.1:8090") && w.contains("authenticates no peer")
        ),
        "{warned:?}"
    );
    // A Raft port with mutual TLS, or on loopback, is not warned about.
    assert!(warnings(&Exposure { raft_tls: true, ..e.clone() }).is_empty());
    assert!(warnings(&exposure("127.0.0.1:8080", "127.0.0.1:8090")).is_empty());
    // The API off loopback without tokens is named, plain or not.
    let api = warnings(&Exposure { insecure: true, ..exposure("10.0.0.1:8080", "127.0.0.1:8090") });
    assert!(api.iter().any(|w| w.contains("plain HTTP authenticates nobody")), "{api:?}");
}
