//! The control thread's side toward the applications: their connections on the Unix socket, the
//! hello that creates an application's inbox bridge, and its requests, forwarded to the
//! controller under the node's own numbers.

use std::io::{ErrorKind, Read, Write};

use kairos_io::bridge;
use kairos_ring::bridge::BridgeLayout;
use kairos_sys::shm::shm_path;
use mio::net::UnixStream;
use mio::{Interest, Token};

use super::control::{Control, Pending};
use super::{INBOX_SLOTS, MAX_MESSAGE};
use crate::node::app::{AppToNode, NodeToApp, valid_app_name};
use crate::node::lane::LaneCommand;
use crate::service::wire::{FrameReader, ToController, TunnelSpec, put_frame};
use crate::te::TunnelId;

pub(super) struct App {
    stream: UnixStream,
    reader: FrameReader,
    out: Vec<u8>,
    name: Option<String>,
    closed: bool,
}

impl Control {
    pub(super) fn accept(&mut self) {
        loop {
            let (mut stream, _) = match self.listener.accept() {
                Ok(pair) => pair,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return,
            };
            let token = Token(self.next_token);
            self.next_token += 1;
            if self
                .poll
                .registry()
                .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
                .is_err()
            {
                continue;
            }
            self.apps.insert(
                token,
                App { stream, reader: FrameReader::new(), out: Vec::new(), name: None, closed: false },
            );
        }
    }

    pub(super) fn read_app(&mut self, token: Token) {
        let mut messages = Vec::new();
        let Some(app) = self.apps.get_mut(&token) else { return };
        let mut buf = [0u8; 16 << 10];
        loop {
            match app.stream.read(&mut buf) {
                Ok(0) => {
                    app.closed = true;
                    break;
                }
                Ok(n) => app.reader.push(&buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    app.closed = true;
                    break;
                }
            }
        }
        loop {
            match app.reader.next_frame() {
                Ok(Some(body)) => match serde_json::from_slice::<AppToNode>(body) {
                    Ok(m) => messages.push(m),
                    Err(e) => {
                        let reason = format!("not a message: {e}");
                        messages.clear();
                        self.tell_app(token, &NodeToApp::Error { reason });
                        return self.app_gone(token);
                    }
                },
                Ok(None) => break,
                Err(_) => {
                    app.closed = true;
                    break;
                }
            }
        }
        let closed = app.closed;
        for m in messages {
            self.app_message(token, m);
        }
        if closed {
            self.app_gone(token);
        }
    }

    fn app_message(&mut self, token: Token, m: AppToNode) {
        let named = self.apps.get(&token).is_some_and(|a| a.name.is_some());
        match m {
            AppToNode::Hello { app } if !named => {
                if !valid_app_name(&app) {
                    let reason =
                        format!("'{app}' is not an application name: 1 to 32 letters, digits, '-' or '_'");
                    return self.tell_app(token, &NodeToApp::Error { reason });
                }
                let path = shm_path(&format!("{}{app}-{}-in", self.bridge_prefix(), token.0));
                let layout =
                    BridgeLayout::for_messages(INBOX_SLOTS, MAX_MESSAGE + 16).expect("a valid layout");
                let inbox = path.map_err(|e| e.to_string()).and_then(|p| {
                    bridge::create(&p, layout).map(|b| (p, b.into_producer())).map_err(|e| e.to_string())
                });
                // The inbox's doorbell, beside it (removed with the node's bridges). Without
                // one the application looks at its inbox on its own clock.
                let bell_path = shm_path(&format!("{}{app}-{}-bell", self.bridge_prefix(), token.0)).ok();
                let bell = bell_path.as_ref().and_then(|p| kairos_sys::bell::Bell::create_ringer(p).ok());
                let doorbell = bell.as_ref().and(bell_path);
                match inbox {
                    Ok((path, inbox)) => {
                        let _ = self.commands.send(LaneCommand::Inbox { app: token.0 as u64, inbox, bell });
                        if let Some(a) = self.apps.get_mut(&token) {
                            a.name = Some(app);
                        }
                        let welcome =
                            NodeToApp::Welcome { host: self.config.host.clone(), inbox: path, doorbell };
                        self.tell_app(token, &welcome);
                    }
                    Err(reason) => self.tell_app(token, &NodeToApp::Error { reason }),
                }
            }
            _ if !named => self.tell_app(token, &NodeToApp::Error { reason: "say hello first".into() }),
            AppToNode::Hello { .. } => {
                self.tell_app(token, &NodeToApp::Error { reason: "hello again".into() })
            }
            AppToNode::Request { app_ref, tunnel } => self.forward(token, app_ref, None, tunnel),
            AppToNode::Change { app_ref, tunnel_id, tunnel } => {
                if self.owners.get(&tunnel_id) != Some(&token) {
                    let reason = format!("tunnel {tunnel_id} is not this application's");
                    return self.tell_app(token, &NodeToApp::Refused { app_ref, reason });
                }
                self.forward(token, app_ref, Some(tunnel_id), tunnel)
            }
            AppToNode::Release { tunnel_id } => {
                if self.owners.get(&tunnel_id) == Some(&token) {
                    self.send_controller(&ToController::Release { tunnel_id });
                }
            }
            AppToNode::Listen { name } => {
                let _ = self.commands.send(LaneCommand::Listen { app: token.0 as u64, name });
            }
        }
    }

    fn forward(&mut self, token: Token, app_ref: u64, change: Option<TunnelId>, tunnel: TunnelSpec) {
        if self.link.is_none() {
            let reason = "the controller is not reachable now (the node is reconnecting)".to_string();
            return self.tell_app(token, &NodeToApp::Refused { app_ref, reason });
        }
        let node_ref = self.next_ref;
        self.next_ref += 1;
        self.pending.insert(node_ref, Pending { app: token, app_ref, spec: tunnel.clone() });
        let message = match change {
            None => ToController::Request { app_ref: node_ref, tunnel },
            Some(tunnel_id) => ToController::Change { app_ref: node_ref, tunnel_id, tunnel },
        };
        self.send_controller(&message);
    }

    fn app_gone(&mut self, token: Token) {
        if let Some(mut app) = self.apps.remove(&token) {
            let _ = self.poll.registry().deregister(&mut app.stream);
        }
        let _ = self.commands.send(LaneCommand::AppGone { app: token.0 as u64 });
        let owned: Vec<TunnelId> =
            self.owners.iter().filter(|(_, a)| **a == token).map(|(t, _)| *t).collect();
        for tunnel_id in owned {
            self.send_controller(&ToController::Release { tunnel_id });
        }
        self.pending.retain(|_, p| p.app != token);
    }

    pub(super) fn tell_app(&mut self, token: Token, m: &NodeToApp) {
        let Some(app) = self.apps.get_mut(&token) else { return };
        put_frame(&serde_json::to_vec(m).expect("messages serialise"), &mut app.out);
    }

    pub(super) fn flush_apps(&mut self) {
        let mut gone = Vec::new();
        for (token, app) in self.apps.iter_mut() {
            while !app.out.is_empty() {
                match app.stream.write(&app.out) {
                    Ok(0) => {
                        gone.push(*token);
                        break;
                    }
                    Ok(n) => {
                        app.out.drain(..n);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        gone.push(*token);
                        break;
                    }
                }
            }
            // An application that does not read its events loses its connection, not the node.
            if app.out.len() > 1 << 20 {
                gone.push(*token);
            }
        }
        for t in gone {
            self.app_gone(t);
        }
    }
}
