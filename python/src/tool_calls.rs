//! Tool calls for `Llama.create_chat_completion(tools=…, tool_choice=…)`: the library's
//! generic form (`lucent::pipeline::tools`) as plain functions. Tools come as
//! `[(name, description, parameters as JSON text), …]`, messages as `[(role, content), …]`.

use lucent::pipeline::tools::{self, Tool, ToolCall, ToolChoice};
use lucent::pipeline::Message;
use pyo3::prelude::*;

use crate::OrPy;

type PyTool = (String, Option<String>, String);

/// The tools as the library's, checked (name rule, parameters JSON).
fn read_tools(list: &[PyTool]) -> PyResult<Vec<Tool>> {
    list.iter()
        .enumerate()
        .map(|(i, (name, description, parameters))| {
            let p: serde_json::Value = serde_json::from_str(parameters).map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!(
                    "tools[{i}].function.parameters is not JSON: {e}"
                ))
            })?;
            Tool::new(name, description.as_deref(), Some(p)).map_err(|e| {
                pyo3::exceptions::PyValueError::new_err(format!("tools[{i}].function.name: {e}"))
            })
        })
        .collect()
}

/// `messages` with the tools section in the system message.
#[pyfunction]
fn tool_messages(
    messages: Vec<(String, String)>,
    tools: Vec<PyTool>,
) -> PyResult<Vec<(String, String)>> {
    let msgs: Vec<Message> = messages.iter().map(|(r, c)| Message::new(r, c)).collect();
    Ok(tools::with_tools(&msgs, &read_tools(&tools)?)
        .into_iter()
        .map(|m| (m.role, m.content))
        .collect())
}

/// The Lark grammar of `choice` (`auto`, `none`, `required`, or `function` with
/// `function` the name) over `tools`; None for `none`.
#[pyfunction]
#[pyo3(signature = (tools, choice, function = None, parallel = true))]
fn tool_grammar(
    tools: Vec<PyTool>,
    choice: &str,
    function: Option<String>,
    parallel: bool,
) -> PyResult<Option<String>> {
    let choice = match (choice, function) {
        ("auto", _) => ToolChoice::Auto,
        ("none", _) => ToolChoice::None,
        ("required", _) => ToolChoice::Required,
        ("function", Some(name)) => ToolChoice::Function(name),
        (other, _) => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "tool_choice must be \"auto\", \"none\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {other:?}"
            )))
        }
    };
    let c = tools::constraint(&read_tools(&tools)?, &choice, parallel).or_py()?;
    Ok(c.map(|c| match c {
        lucent::pipeline::Constraint::Lark(g) => g,
        _ => String::new(),
    }))
}

/// The calls `[(name, arguments JSON), …]` if `text` is calls of `tools`, else None.
#[pyfunction]
fn tool_parse(text: &str, tools: Vec<PyTool>) -> PyResult<Option<Vec<(String, String)>>> {
    Ok(tools::parse_calls(text, &read_tools(&tools)?)
        .map(|calls| calls.into_iter().map(|c| (c.name, c.arguments)).collect()))
}

/// An assistant message with `content` and calls `[(name, arguments JSON), …]`, as
/// `(role, content)` in the generic form.
#[pyfunction]
fn tool_assistant(content: &str, calls: Vec<(String, String)>) -> (String, String) {
    let calls: Vec<ToolCall> = calls
        .into_iter()
        .map(|(name, arguments)| ToolCall { name, arguments })
        .collect();
    let m = tools::assistant_message(content, &calls);
    (m.role, m.content)
}

/// A tool's result as `(role, content)` in the generic form.
#[pyfunction]
fn tool_result(content: &str) -> (String, String) {
    let m = tools::result_message(content);
    (m.role, m.content)
}

/// A fresh call id (`call_…`).
#[pyfunction]
fn tool_call_id() -> String {
    tools::call_id()
}

/// Add the functions to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(tool_messages, m)?)?;
    m.add_function(wrap_pyfunction!(tool_grammar, m)?)?;
    m.add_function(wrap_pyfunction!(tool_parse, m)?)?;
    m.add_function(wrap_pyfunction!(tool_assistant, m)?)?;
    m.add_function(wrap_pyfunction!(tool_result, m)?)?;
    m.add_function(wrap_pyfunction!(tool_call_id, m)?)?;
    Ok(())
}
