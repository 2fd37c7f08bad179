//! Distillation (`gmlx distill`): a student model learns to answer questions about documents it
//! no longer sees, from a teacher that reads them. The teacher's pass ([`teacher`]) answers each
//! question with the document in its prompt and keeps its distributions; the student's rows
//! ([`student`]) hold the question alone with the teacher's answer as targets, learned as the
//! teacher's distributions where the two tokenizations align, as tokens elsewhere; then
//! [`crate::train_examples`] trains the student's adapter on them.
pub mod data;
pub mod student;
pub mod teacher;

pub use data::{read_dir, Document, Documents};
pub use student::{examples, AlignStats};
pub use teacher::{answer_all, Answer, TeacherSettings, TeacherStats};
